#!/usr/bin/env python3
"""Measure PyTorch FSDP2 (fully_shard) training memory and time on one GPU: the reference that
shardtune's `estimate` and `simulate` are compared with (tests/data/validation/).

One configuration per process (a fresh CUDA context and caching allocator each time). A world
of N > 1 ranks runs as rank 0 of N over PyTorch's fake process group
(torch.testing._internal.distributed.fake_pg): every allocation FSDP2 makes for its all-gather
and reduce-scatter buffers happens exactly as on a real rank, the collectives move no data.
So the per-rank *memory* of an N-GPU job is measured on one GPU; its *time* lacks the
communication. World 1 uses a real NCCL process group, so NCCL's own memory is in the
`outside` figures.

Model: Hugging Face transformers' LlamaForCausalLM, built on the meta device from a config
(Llama-3.2-1B or Llama-3-8B shapes), or with --hf-config any architecture transformers builds
from a config.json (AutoModelForCausalLM.from_config; a multimodal config's text_config: Gemma 3),
optionally cut to --layers decoder layers (issue #20's MoE and 2026 architectures, e.g.
tests/data/model/qwen3-30b-a3b.config.json --layers 4: the JSON result carries the config it
built, which compare_estimate.py hands to `shardtune estimate --model`), `fully_shard` per decoder layer and then the root, as
torchtitan and the FSDP2 tutorial do; MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32);
torch.optim.AdamW (foreach by default). Loss: HF's own (labels=input_ids: fp32 upcast logits,
shift, cross-entropy).

--dpo-reference runs TRL's DPO step instead of HF's loss (huggingface/trl@f2cd577
trl/trainer/dpo_trainer.py _compute_loss): the policy's logits, TRL's selective_log_softmax of
them (copied below from trl/trainer/utils.py), then a reference forward under no_grad on the same
rows (`fsdp2_root`: a frozen bf16 copy, fully_shard on its root only with reshard_after_forward
passed explicitly, as TRL's prepare_fsdp does; `adapters_off`: the PEFT policy with its adapters
disabled, needs --lora-rank), its log-probs, and the sigmoid DPO loss over the --mb rows as
chosen/rejected halves; its peak is in the forward phase. shardtune's figure for it: `estimate
--loss-kernel trl_logps --reference ...`.

Per step it records the peak of torch.cuda.max_memory_allocated over forward, backward and the
optimizer step separately (reset between phases), reserved bytes, and the device's used memory
from cudaMemGetInfo (what nvidia-smi shows for this one process), and the step time.
Prints one JSON object on stdout.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist

MODELS = {
    # meta-llama/Llama-3.2-1B config.json
    "llama3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=64, tie_word_embeddings=True, rope_theta=500000.0,
                        max_position_embeddings=131072, rms_norm_eps=1e-5),
    # meta-llama/Meta-Llama-3-8B config.json
    "llama3-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, tie_word_embeddings=False, rope_theta=500000.0,
                      max_position_embeddings=8192, rms_norm_eps=1e-5),
}

MiB = 2**20


def rebuild_rotary(m, cfg):
    """A rotary embedding whose class computes inv_freq in __init__ (no rope_init_fn): build a
    fresh one of the same class on the GPU and take its buffers and float attributes (what
    to_empty left uninitialised). Memory and time do not depend on these values; the loss does."""
    import inspect
    params = inspect.signature(type(m).__init__).parameters
    kw = {}
    if "config" in params:
        kw["config"] = getattr(m, "config", cfg)
    if "device" in params:
        kw["device"] = "cuda"
    for name in ("layer_type", "dim", "base", "max_position_embeddings"):
        if name in params and hasattr(m, name):
            kw[name] = getattr(m, name)
    fresh = type(m)(**kw)
    for name, buf in fresh.named_buffers(recurse=False):
        setattr(m, name, buf.to("cuda"))
    for k, v in vars(fresh).items():
        if not k.startswith("_") and isinstance(v, float):
            setattr(m, k, v)


def init_group(world, port):
    """World 1: a one-rank NCCL group (NCCL's own memory is then in the figures); N > 1: rank 0
    of N over PyTorch's fake process group (every FSDP2 allocation happens, no data moves)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", port)
    if world == 1:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    else:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)


def used_bytes():
    free, total = torch.cuda.mem_get_info()
    return total - free


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.2-1b", choices=sorted(MODELS))
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--mb", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--ckpt", default="none", choices=["none", "full"])
    ap.add_argument("--reshard", type=int, default=1)  # reshard_after_forward
    ap.add_argument("--optim", default="foreach", choices=["foreach", "fused", "forloop"])
    ap.add_argument("--param-dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--tag", default="")
    ap.add_argument("--hf-config", default="",
                    help="a config.json to build instead of --model (AutoModelForCausalLM)")
    ap.add_argument("--master-dtype", default="fp32", choices=["fp32", "bf16", "config"],
                    help="dtype of the sharded (master) parameters and AdamW state; config: what "
                         "transformers built from --hf-config")
    ap.add_argument("--layers", type=int, default=0,
                    help="with --hf-config: keep this many decoder layers (0: all)")
    ap.add_argument("--root-reshard", default="explicit", choices=["explicit", "default"])
    # Parameter-efficient and frozen runs (PEFT LoRA: peft.get_peft_model before fully_shard, as
    # TRL/Accelerate do; autocast_adapter_dtype keeps adapters fp32 over a bf16 base).
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--lora-alpha", type=float, default=32.0)
    ap.add_argument("--lora-targets", default="q_proj,v_proj")
    ap.add_argument("--freeze-layers", type=int, default=-1,
                    help="freeze the embeddings and the first K decoder layers (-1: none)")
    ap.add_argument("--base-dtype", default="fp32", choices=["fp32", "bf16"],
                    help="dtype of the module (the sharded parameters) when fully_shard runs")
    ap.add_argument("--offload", type=int, default=0,
                    help="1: CPUOffloadPolicy(pin_memory=True); AdamW then runs on the host")
    ap.add_argument("--dpo-reference", default="", choices=["", "none", "fsdp2_root", "adapters_off"],
                    help="TRL's DPO step with this reference (see the module docstring); '': HF's loss")
    ap.add_argument("--trace", default="",
                    help="after the timed steps, profile 4 more (torch.profiler, CPU + CUDA, the "
                         "first as warm-up) and write their Chrome trace here: the input of "
                         "`shardtune calibrate --trace` (profiling slows the host: the timed "
                         "steps are not profiled)")
    a = ap.parse_args()

    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    context_used = used_bytes()  # CUDA context + the 512-byte tensor's 2 MiB segment

    init_group(a.world, "29511")

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    hf_config_json = None
    if a.hf_config:
        cfg = transformers.AutoConfig.from_pretrained(a.hf_config)
        if getattr(cfg, "text_config", None) is not None:  # Gemma3ForConditionalGeneration
            cfg = cfg.text_config
        if a.layers > 0:
            cfg.num_hidden_layers = a.layers
            if getattr(cfg, "layer_types", None):
                cfg.layer_types = cfg.layer_types[:a.layers]
        cfg._attn_implementation = a.attn
        if getattr(cfg, "quantization_config", None) is not None:
            del cfg.quantization_config  # GPT-OSS: train the experts dequantized (bf16)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        hf_config_json = cfg.to_dict()
        hf_config_json["architectures"] = [type(model).__name__]
    else:
        cfg = LlamaConfig(**MODELS[a.model])
        cfg._attn_implementation = a.attn
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
    # transformers 5 builds a --hf-config model in its config's dtype (bfloat16 for most published
    # configs; a multimodal config's text_config has none): --master-dtype fp32 (the default, as the
    # Llama presets) upcasts it, "config" keeps what transformers built. Runs before 2026-11-27 had
    # no such flag: their master dtype is after_init_allocated over the rank's parameters.
    if a.master_dtype == "fp32":
        model.float()
    elif a.master_dtype == "bf16":
        model.to(torch.bfloat16)
    if a.base_dtype == "bf16":
        model.to(torch.bfloat16)
    if a.ckpt == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    if a.freeze_layers >= 0:
        model.model.embed_tokens.requires_grad_(False)
        for layer in model.model.layers[:a.freeze_layers]:
            layer.requires_grad_(False)
    layers_parent = model.model
    if a.lora_rank > 0:
        import peft
        lcfg = peft.LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                               target_modules=a.lora_targets.split(","), bias="none")
        model = peft.get_peft_model(model, lcfg)  # freezes every base weight
        layers_parent = model.base_model.model.model
    mesh = init_device_mesh("cuda", (a.world,))
    pdt = torch.bfloat16 if a.param_dtype == "bf16" else torch.float32
    mp = MixedPrecisionPolicy(param_dtype=pdt, reduce_dtype=torch.float32)
    extra = {}
    if a.offload:
        from torch.distributed.fsdp import CPUOffloadPolicy
        extra["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    for layer in layers_parent.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp, reshard_after_forward=bool(a.reshard), **extra)
    # The root: --root-reshard default leaves reshard_after_forward at FSDP2's default (None:
    # the root stays unsharded after forward, _fsdp_state.py _lazy_init); explicit passes the
    # same value as the blocks (True also reshards the root).
    root_kw = {} if (a.root_reshard == "default" and a.reshard) else {
        "reshard_after_forward": bool(a.reshard)}
    fully_shard(model, mesh=mesh, mp_policy=mp, **root_kw, **extra)
    model.to_empty(device="cpu" if a.offload else "cuda")
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().normal_(0.0, 0.02)
    # Non-persistent buffers were on meta: rebuild them on the GPU (every rotary embedding's
    # inv_freq through its own init function; Gemma 3's embedding scale).
    if a.hf_config:
        for m in model.modules():
            if hasattr(m, "inv_freq") and hasattr(m, "rope_init_fn"):
                inv_freq, m.attention_scaling = m.rope_init_fn(m.config, "cuda")
                m.register_buffer("inv_freq", inv_freq, persistent=False)
                m.original_inv_freq = inv_freq
            elif hasattr(m, "inv_freq") and type(m).__name__.endswith("RotaryEmbedding"):
                rebuild_rotary(m, cfg)
            if hasattr(m, "embed_scale") and isinstance(m.embed_scale, torch.Tensor):
                m.embed_scale = torch.tensor(cfg.hidden_size**0.5, device="cuda")
    else:
        layers_parent.rotary_emb = modeling_llama.LlamaRotaryEmbedding(config=cfg, device="cuda")
    ref = None
    if a.dpo_reference == "fsdp2_root":
        # TRL's reference copy: loaded frozen in bf16 (the recipe's dtype), prepare_fsdp's
        # fully_shard(model, reshard_after_forward=..., mp_policy=...) on the root only, eval().
        with torch.device("meta"):
            ref = (transformers.AutoModelForCausalLM.from_config(cfg) if a.hf_config else LlamaForCausalLM(cfg))
        ref.to(torch.bfloat16)
        ref.requires_grad_(False)
        ref.config.use_cache = False
        fully_shard(ref, mesh=mesh, mp_policy=mp, reshard_after_forward=True)
        ref.to_empty(device="cuda")
        with torch.no_grad():
            for p in ref.parameters():
                p.to_local().normal_(0.0, 0.02)
        if not a.hf_config:
            ref.model.rotary_emb = modeling_llama.LlamaRotaryEmbedding(config=cfg, device="cuda")
        ref.eval()
    if a.dpo_reference == "adapters_off" and a.lora_rank <= 0:
        raise SystemExit("--dpo-reference adapters_off needs --lora-rank")
    torch.cuda.synchronize()
    n_params = sum(p.numel() for p in model.parameters())
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    after_init_alloc = torch.cuda.memory_allocated()

    okw = dict(lr=1e-4, weight_decay=0.01)
    if a.optim == "fused":
        okw["fused"] = True
    elif a.optim == "forloop":
        okw["foreach"] = False
    else:
        okw["foreach"] = True
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], **okw)

    g = torch.Generator(device="cuda").manual_seed(0)

    def selective_log_softmax(logits, index):
        # trl/trainer/utils.py at f2cd577, unchanged in substance.
        index = index.unsqueeze(-1)
        if logits.dtype in [torch.float32, torch.float64]:
            selected_logits = torch.gather(logits, dim=-1, index=index)
            logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
            per_token_logps = selected_logits - logsumexp_values.unsqueeze(-1)
        else:
            per_token_logps = []
            for row_logits, row_labels in zip(logits, index):
                row_logps = torch.nn.functional.log_softmax(row_logits, dim=-1)
                per_token_logps.append(row_logps.gather(dim=-1, index=row_labels))
            per_token_logps = torch.stack(per_token_logps)
        return per_token_logps.squeeze(-1)

    def dpo_loss(x):
        # DPOTrainer._compute_loss: `outputs` holds the policy's logits through the reference's
        # forward and the loss (it is released when the function returns).
        outputs = model(input_ids=x, use_cache=False)
        labels = x[..., 1:]
        logps = selective_log_softmax(outputs.logits[..., :-1, :], labels).sum(dim=1)
        with torch.no_grad():
            if a.dpo_reference == "none":
                ref_logps = torch.zeros_like(logps)
            elif a.dpo_reference == "adapters_off":
                with model.disable_adapter():
                    r = model(input_ids=x, use_cache=False)
                ref_logps = selective_log_softmax(r.logits[..., :-1, :], labels).sum(dim=1)
                del r
            else:
                r = ref(input_ids=x, use_cache=False)
                ref_logps = selective_log_softmax(r.logits[..., :-1, :], labels).sum(dim=1)
                del r
        chosen, rejected = logps.chunk(2)
        ref_chosen, ref_rejected = ref_logps.chunk(2)
        margin = (chosen - ref_chosen) - (rejected - ref_rejected)
        return -torch.nn.functional.logsigmoid(0.1 * margin).mean()

    def train_loss(x):
        return dpo_loss(x) if a.dpo_reference else model(input_ids=x, labels=x).loss

    def plain_step():
        for _ in range(a.accum):
            x = torch.randint(0, cfg.vocab_size, (a.mb, a.seq), device="cuda", generator=g)
            (train_loss(x) / a.accum).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    steps = []
    for step in range(a.steps):
        rec = {"step": step}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fwd_peak = bwd_peak = 0
        for micro in range(a.accum):
            x = torch.randint(0, cfg.vocab_size, (a.mb, a.seq), device="cuda", generator=g)
            torch.cuda.reset_peak_memory_stats()
            rec.setdefault("before_forward_allocated", torch.cuda.memory_allocated())
            h0 = time.perf_counter()
            out = dpo_loss(x) if a.dpo_reference else model(input_ids=x, labels=x)
            # Host time to issue each phase (no synchronisation in between: the calls return once
            # their kernels are queued; where the host is the bottleneck this is its issue cost,
            # which a profiler trace inflates): the host model's measurement (#17).
            rec["host_forward_s"] = rec.get("host_forward_s", 0.0) + time.perf_counter() - h0
            fwd_peak = max(fwd_peak, torch.cuda.max_memory_allocated())
            rec.setdefault("after_forward_allocated", torch.cuda.memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            loss = (out if a.dpo_reference else out.loss) / a.accum
            del out
            h0 = time.perf_counter()
            loss.backward()
            rec["host_backward_s"] = rec.get("host_backward_s", 0.0) + time.perf_counter() - h0
            bwd_peak = max(bwd_peak, torch.cuda.max_memory_allocated())
            del loss, x
        rec["after_backward_allocated"] = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        h0 = time.perf_counter()
        opt.step()
        rec["host_optimizer_s"] = time.perf_counter() - h0
        opt_peak = torch.cuda.max_memory_allocated()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        rec["time_s"] = time.perf_counter() - t0
        rec["forward_peak_allocated"] = fwd_peak
        rec["backward_peak_allocated"] = bwd_peak
        rec["optimizer_peak_allocated"] = opt_peak
        rec["peak_allocated"] = max(fwd_peak, bwd_peak, opt_peak)
        rec["after_step_allocated"] = torch.cuda.memory_allocated()
        rec["reserved"] = torch.cuda.memory_reserved()
        rec["max_reserved"] = torch.cuda.max_memory_reserved()
        rec["device_used"] = used_bytes()
        stats = torch.cuda.memory_stats()
        rec["alloc_retries"] = stats.get("num_alloc_retries", 0)
        # The caching allocator's state after the step (c10/cuda/CUDACachingAllocator.cpp
        # DeviceStats): segments and cached free ("inactive split") bytes per pool, what the
        # allocator replay in `shardtune estimate` predicts as reserved - allocated.
        rec["allocator"] = {k: stats.get(k, 0) for k in (
            "segment.all.current", "segment.small_pool.current", "segment.large_pool.current",
            "segment.all.peak", "reserved_bytes.small_pool.peak", "reserved_bytes.large_pool.peak",
            "allocated_bytes.small_pool.peak", "allocated_bytes.large_pool.peak",
            "inactive_split_bytes.all.current", "inactive_split_bytes.all.peak",
            "inactive_split.all.current", "num_alloc_retries", "num_ooms")}
        steps.append(rec)

    if a.trace:
        from torch.profiler import ProfilerActivity, profile, schedule
        # repeat=1: one warm-up + 3 active steps, exported when the cycle ends (with the default
        # repeat=0 the schedule starts a new cycle and an export after the loop holds no events).
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(a.trace)) as prof:
            for _ in range(4):
                plain_step()
                prof.step()

    tokens = a.mb * a.seq * a.accum * a.world
    steady = [s["time_s"] for s in steps[2:]] or [steps[-1]["time_s"]]
    med = statistics.median(steady)
    L, H, S = cfg.num_hidden_layers, cfg.hidden_size, a.seq
    flops_per_token = 6 * n_params + 12 * L * H * S  # the README's MFU convention
    result = {
        "config": vars(a),
        "hf_config_json": hf_config_json,  # what --hf-config built (None: a --model preset)
        "n_params": n_params,
        "master_dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "n_trainable": n_trainable,
        "context_used_bytes": context_used,
        "after_init_allocated": after_init_alloc,
        "steps": steps,
        "steady_step_time_s_median": med,
        "tokens_per_s_per_gpu": a.mb * a.seq * a.accum / med,
        "mfu_989": (a.mb * a.seq * a.accum / med) * flops_per_token / 989e12,
        "host_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "cuda": torch.version.cuda, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "gpu": torch.cuda.get_device_name(0),
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "expandable_segments": "expandable_segments:True" in
                os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
    }
    print(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
