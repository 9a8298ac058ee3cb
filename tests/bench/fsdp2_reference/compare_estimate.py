#!/usr/bin/env python3
"""Compare `shardtune estimate` with measured PyTorch FSDP2 runs (measure_fsdp2.py JSON lines or
a fsdp2_h100_measured.json document): step-0 and steady peak allocated, and the ratio.

Usage: compare_estimate.py SHARDTUNE_BIN FILE [FILE...]
A run's configuration maps onto estimate's flags: world W -> --cluster WxH100, mb, seq, accum,
ckpt, reshard, optimizer implementation, attention, param dtype; --lora-rank/--lora-alpha/
--lora-targets (PEFT; adapters fp32 as peft's autocast_adapter_dtype keeps them);
--freeze-layers K -> --freeze model.embed_tokens and model.layers.0. .. K-1.;
--base-dtype -> --frozen-dtype (what the frozen sharded parameters are stored in, when the
binary has the flag); --offload 1 -> --offload all; a bf16 master (master_dtype_of) ->
--master-dtype bf16.
"""
import json
import subprocess
import tempfile
import sys

G = 2**30


def runs(path):
    text = open(path).read()
    if text.lstrip().startswith("{") and '"runs"' in text[:5000]:
        yield from json.loads(text)["runs"]
        return
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def flags(c, has_frozen_dtype, model_arg=None, master_dtype=None):
    f = ["--model", model_arg or c["model"], "--cluster", f'{c["world"]}xH100', "--micro-batch", str(c["mb"]),
         "--seq-len", str(c["seq"]), "--grad-accum", str(c.get("accum", 1)),
         "--global-batch", str(c["mb"] * c.get("accum", 1) * c["world"]),
         "--checkpointing", "full" if c.get("ckpt") == "full" else "none",
         "--precision", c.get("param_dtype", "bf16"), "--reduce-dtype", "fp32",
         "--attention", c.get("attn", "sdpa"), "--optimizer-impl", c.get("optim", "foreach")]
    if not c.get("reshard", 1):
        f += ["--reshard-after-forward", "false"]
    if c.get("lora_rank", 0) > 0:
        f += ["--lora-rank", str(c["lora_rank"]), "--lora-alpha", str(c["lora_alpha"]),
              "--lora-targets", c["lora_targets"], "--lora-dtype", "fp32"]
    if c.get("freeze_layers", -1) >= 0:
        f += ["--freeze", "model.embed_tokens"]
        for i in range(c["freeze_layers"]):
            f += ["--freeze", f"model.layers.{i}."]
    if c.get("base_dtype", "fp32") != "fp32" and has_frozen_dtype:
        f += ["--frozen-dtype", c["base_dtype"]]
    if c.get("offload", 0):
        f += ["--offload", "all"]
    if master_dtype and master_dtype != "fp32":
        f += ["--master-dtype", master_dtype]
    return f


def master_dtype_of(r):
    """The run's master dtype: recorded since 2026-11-27; before, the bytes per parameter a rank
    held after init (transformers 5 built some --hf-config models in bfloat16)."""
    if "master_dtype" in r:
        return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[r["master_dtype"]]
    c = r["config"]
    if c.get("offload", 0) or c.get("base_dtype", "fp32") != "fp32" or not r.get("n_params"):
        return "fp32"
    per_param = r["after_init_allocated"] / (r["n_params"] / c["world"])
    return "bf16" if per_param < 3 else "fp32"


def main():
    binary = sys.argv[1]
    help_text = subprocess.run([binary, "estimate", "--help"], capture_output=True, text=True).stdout
    has_frozen_dtype = "--frozen-dtype" in help_text
    print(f"{'run':<78} {'FSDP2 s0':>9} {'est s0':>8} {'err':>7}   {'FSDP2 st':>9} {'est st':>8} {'err':>7}")
    for path in sys.argv[2:]:
        for r in runs(path):
            if "error" in r:
                continue
            c = r["config"]
            model_arg = None
            if r.get("hf_config_json"):  # --hf-config: the config it built, as a config.json
                tmp = tempfile.NamedTemporaryFile("w", suffix=".config.json", delete=False)
                json.dump(r["hf_config_json"], tmp)
                tmp.close()
                model_arg = tmp.name
            master = master_dtype_of(r)
            cmd = [binary, "estimate", "--json"] + flags(c, has_frozen_dtype, model_arg, master)
            p = subprocess.run(cmd, capture_output=True, text=True)
            name = " ".join(a for a in flags(c, has_frozen_dtype, model_arg, master)[1:]
                            if a not in ("--freeze",))
            if model_arg:  # the config's file name and layers, not the temporary copy's path
                label = c["hf_config"].split("/")[-1].replace(".config.json", "")
                name = f"{label} L{c.get('layers', 0)} " + name.replace(model_arg + " ", "")
            name = (name[:75] + "...") if len(name) > 78 else name
            if p.returncode != 0:
                print(f"{name:<78} estimate failed: {p.stderr.strip()[:200]}")
                continue
            e = json.loads(p.stdout)["per_rank"]
            s0 = r["steps"][0]["peak_allocated"]
            st = max(s["peak_allocated"] for s in r["steps"][1:])
            print(f"{name:<78} {s0/G:9.2f} {e['step0_peak_bytes']/G:8.2f} {100*(e['step0_peak_bytes']/s0-1):+6.1f}%"
                  f"   {st/G:9.2f} {e['steady_peak_bytes']/G:8.2f} {100*(e['steady_peak_bytes']/st-1):+6.1f}%")


if __name__ == "__main__":
    main()
