#!/usr/bin/env python3
"""Measure the host's cost of issuing a PyTorch FSDP2 + Hugging Face training step (issue #17).

The simulator charges each op's host time as launches x a per-launch cost plus FSDP2 hook calls x
a per-hook cost (simulator/cost_model.h host_per_kernel, host_per_fsdp_hook). This script
measures those mechanisms on the machine it runs on, without the profiler's overhead:

  1. The same Llama model is stepped on inputs so small (micro-batch 1, --seq tokens) that the
     GPU finishes every kernel before the host issues the next: each phase's wall time from the
     call to its return (forward, backward, AdamW step, zero_grad) is then the host's issue time.
     The median over --iters timed steps is taken.
  2. One more step runs under torch.profiler, only to count what each phase issues: CUDA
     runtime/driver launch calls (kernel launches, async memcpy and memset) and FSDP2's hook
     calls (its record_function spans "FSDP::pre_forward", ...). Profiled times are not used.
  3. Plain model (no FSDP, bf16 parameters: the kernels FSDP2's bf16 MixedPrecisionPolicy runs)
     gives the per-launch cost of each phase: forward issued from Python modules, backward from
     the autograd engine's C++ thread, the optimizer's foreach kernels.
  4. The same model under fully_shard per decoder layer and the root (as measure_fsdp2.py) gives
     each phase's extra host time; divided by the unit count it is the hook cost per unit (the
     hooks' own copy-in / all-gather / copy-out / reduce-scatter launches included, as the
     simulator charges them). World 1 runs over NCCL, world N > 1 as rank 0 over the fake
     process group (as measure_fsdp2.py; no data moves, every host-side step runs).

Prints one JSON object per configuration on stdout. Usage:
  host_costs.py [--model llama3.2-1b] [--layers N] [--world 1] [--seq 16] [--iters 15]
               [--repeats 3] [--optim foreach|fused]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_fsdp2 import MODELS, init_group  # noqa: E402  (the reference's configs and group)

LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchCooperativeKernel")


def build(cfg_kw, layers, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    kw = dict(cfg_kw)
    if layers > 0:
        kw["num_hidden_layers"] = layers
    cfg = LlamaConfig(**kw)
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model.to(dtype)
    return model, cfg, modeling_llama


def materialise(model, cfg, modeling_llama, inner=None):
    model.to_empty(device="cuda")
    with torch.no_grad():
        for p in model.parameters():
            (p.to_local() if hasattr(p, "to_local") else p).normal_(0.0, 0.02)
    (inner if inner is not None else model.model).rotary_emb = modeling_llama.LlamaRotaryEmbedding(
        config=cfg, device="cuda")


def count_profiled(step):
    """Runs step(profiled=True) once under the profiler; per phase, the host's launch calls
    (CUDA runtime/driver) and the device activities (kernels, memcpy, memset), each phase
    taken as the window from its start to the next phase's start (every phase begins with a
    synchronisation, so a phase's device work ends inside its window; launches from the autograd
    engine's thread fall inside it too), and FSDP2's hook spans."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(profiled=True)
    torch.cuda.synchronize()
    events = prof.events()
    starts = sorted((e.time_range.start, e.name[len("phase::"):]) for e in events
                    if e.name.startswith("phase::"))
    out = {p: {"launches": 0, "device": 0, "fsdp_hooks": {}} for _, p in starts}

    def phase_of(t):
        found = None
        for s, p in starts:
            if t >= s:
                found = p
        return found

    for e in events:
        p = phase_of(e.time_range.start)
        if p is None:
            continue
        if e.device_type == DeviceType.CUDA:
            out[p]["device"] += 1
        elif e.name in LAUNCH_NAMES:
            out[p]["launches"] += 1
        elif e.name.startswith("FSDP::"):
            h = out[p]["fsdp_hooks"]
            h[e.name] = h.get(e.name, 0) + 1
    return out


def measure(model, opt, cfg, a, label, profile=True):
    g = torch.Generator(device="cuda").manual_seed(0)
    times = {"forward": [], "backward": [], "optimizer": [], "zero_grad": []}

    def step(profiled=False):
        from torch.profiler import record_function
        x = torch.randint(0, cfg.vocab_size, (1, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()

        def phase(name, fn):
            torch.cuda.synchronize()
            if profiled:
                with record_function("phase::" + name):
                    r = fn()
            else:
                t0 = time.perf_counter()
                r = fn()
                times[name].append(time.perf_counter() - t0)
            return r

        out = phase("forward", lambda: model(input_ids=x, labels=x))
        loss = out.loss
        del out
        phase("backward", loss.backward)
        phase("optimizer", opt.step)
        phase("zero_grad", lambda: opt.zero_grad(set_to_none=True))
        torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    for v in times.values():
        v.clear()
    for _ in range(a.iters):
        step()
    counts = count_profiled(step) if profile else {}
    res = {"label": label}
    for p, v in times.items():
        med = statistics.median(v)
        c = counts.get(p, {"launches": 0, "device": 0, "fsdp_hooks": {}})
        n = max(c["launches"], c["device"])
        res[p] = {"host_s": med, "host_s_min": min(v), "samples_s": v, "launches": c["launches"],
                  "device_activities": c["device"], "fsdp_hooks": c["fsdp_hooks"],
                  "per_launch_s": med / n if n else None}
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.2-1b", choices=sorted(MODELS))
    ap.add_argument("--layers", type=int, default=0, help="keep this many decoder layers (0: all)")
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3, help="alternating plain / FSDP2 timings")
    ap.add_argument("--optim", default="foreach", choices=["foreach", "fused"],
                    help="the FSDP2 model's AdamW (the plain one is foreach)")
    ap.add_argument("--lora-rank", type=int, default=0,
                    help="> 0: both models get peft LoRA adapters (r, alpha 2r, no dropout) on "
                         "--lora-targets, base weights frozen: the hooks' cost when a unit's "
                         "post-backward reduces the adapters only (the 8B LoRA reference, #17)")
    ap.add_argument("--lora-targets", default="q_proj,v_proj")
    a = ap.parse_args()

    torch.cuda.set_device(0)
    init_group(a.world, "29513")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0), "cpu": cpu_model(),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    # Plain: bf16 parameters, no FSDP (what each FSDP2 unit runs between its hooks).
    def with_lora(m):
        if a.lora_rank <= 0:
            return m, m.model
        import peft
        lcfg = peft.LoraConfig(r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
                               target_modules=a.lora_targets.split(","), bias="none")
        m = peft.get_peft_model(m, lcfg)  # freezes every base weight
        return m, m.base_model.model.model

    def trainable(m):
        return [p for p in m.parameters() if p.requires_grad]

    plain_model, cfg, ml = build(MODELS[a.model], a.layers, torch.bfloat16)
    plain_model, plain_inner = with_lora(plain_model)
    materialise(plain_model, cfg, ml, plain_inner)
    plain_opt = torch.optim.AdamW(trainable(plain_model), lr=1e-4, weight_decay=0.01, foreach=True)

    # FSDP2: fp32 master, bf16 compute, fp32 reduce; fully_shard per layer, then the root.
    model, cfg, ml = build(MODELS[a.model], a.layers, torch.float32)
    model, inner = with_lora(model)
    mesh = init_device_mesh("cuda", (a.world,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in inner.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    materialise(model, cfg, ml, inner)
    okw = {"fused": True} if a.optim == "fused" else {"foreach": True}
    opt = torch.optim.AdamW(trainable(model), lr=1e-4, weight_decay=0.01, **okw)

    # Alternating repeats in one process (the host's speed drifts between processes and
    # minutes): each repeat times both, and the medians pool every repeat's samples.
    runs = {"plain": [], "fsdp2": []}
    for r in range(a.repeats):
        runs["plain"].append(measure(plain_model, plain_opt, cfg, a, "plain", profile=(r == 0)))
        runs["fsdp2"].append(measure(model, opt, cfg, a, "fsdp2", profile=(r == 0)))
    pooled = {}
    for k, rs in runs.items():
        pooled[k] = dict(rs[0])
        for p in ("forward", "backward", "optimizer", "zero_grad"):
            samples = [x for r in rs for x in r[p]["samples_s"]]
            q = dict(rs[0][p])
            q["host_s"] = statistics.median(samples)
            q["host_s_min"] = min(samples)
            q["repeat_medians_s"] = [r[p]["host_s"] for r in rs]
            q.pop("samples_s")
            n = max(q["launches"], q["device_activities"])
            q["per_launch_s"] = q["host_s"] / n if n else None
            pooled[k][p] = q
    plain, fsdp = pooled["plain"], pooled["fsdp2"]

    units = cfg.num_hidden_layers + 1
    n_params = len(trainable(model))  # the tensors AdamW steps
    derived = {"units": units, "parameter_tensors": n_params,
               "optimizer_s_per_parameter": fsdp["optimizer"]["host_s"] / n_params}
    for p in ("forward", "backward"):
        extra = fsdp[p]["host_s"] - plain[p]["host_s"]
        derived[p + "_hook_s_per_unit"] = extra / units
        derived[p + "_extra_launches"] = fsdp[p]["launches"] - plain[p]["launches"]
        derived[p + "_extra_device_activities"] = (fsdp[p]["device_activities"] -
                                                   plain[p]["device_activities"])
    print(json.dumps({"config": vars(a), "layers": cfg.num_hidden_layers, "env": env,
                      "plain": plain, "fsdp2": fsdp, "derived": derived}))
    dist.destroy_process_group()


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    main()
