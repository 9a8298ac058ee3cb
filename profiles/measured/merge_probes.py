#!/usr/bin/env python3
"""Merges `shardtune probe` outputs of one GPU kind into the profile the catalog ships
(profiles/measured/<kind>.profile.json; gpus.json "measured_profile" names it).

Kept from the probes: the "kernels" tables (GEMM and attention samples of every probe; the
memory-bound, copy and host samples of the first, which every probe measures alike) and the
provenance (the first probe's, with every probe's command). Left out: the probes' "memory",
"compute" and "network" sections, which `probe` copies from the defaults rather than measures,
so a shipped profile changes the kernel times and nothing else.

Usage: merge_probes.py OUT NAME DRIVER_VERSION PROBE.json [PROBE.json ...]
DRIVER_VERSION: what nvidia-smi said in the same session (probes before 2026-11-27 read the
open kernel module's /proc line wrongly and wrote "for").

Attention rows of probes that predate the "pytorch_default" flag (before 2026-11-28) were all
PyTorch's own SDPA choice (that probe never forced a backend) but labelled by assumption: "flash"
for bf16/fp16. On CUDA with torch >= 2.11 that choice is cuDNN attention on sm90 (aten
sdp_utils.cpp check_prefer_cudnn_attention: a bundled cuDNN newer than 9.15), and the same
at::scaled_dot_product_attention call traced as cuDNN kernels on the lent H100 with torch 2.11
(executor/README.md, run --torch-profile, 2026-11-27). Such rows are relabelled "cudnn", and
every row of such a probe is marked pytorch_default.
"""
import json
import sys


def fix_attention_labels(probe):
    rows = probe["kernels"].get("attention", [])
    if any("pytorch_default" in a for a in rows):
        return  # a probe that records its own choice
    torch = tuple(int(x) for x in probe["provenance"]["torch_version"].split("+")[0].split(".")[:2])
    for a in rows:
        if (probe["provenance"]["backend"] == "cuda" and torch >= (2, 11) and a["backend"] == "flash"
                and a["dtype"] in ("bf16", "fp16")):
            a["backend"] = "cudnn"
        a["pytorch_default"] = True


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    out, name, driver, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    probes = [json.load(open(p)) for p in paths]
    for p, d in zip(paths, probes):
        if d.get("schema") != "shardtune.profile" or "kernels" not in d:
            sys.exit(f"merge_probes.py: {p}: expected a shardtune.profile with a kernels section")
        if d["provenance"]["device"] != probes[0]["provenance"]["device"]:
            sys.exit(f"merge_probes.py: {p}: device {d['provenance']['device']!r} differs from "
                     f"{probes[0]['provenance']['device']!r}")
    for d in probes:
        fix_attention_labels(d)
    kernels = json.loads(json.dumps(probes[0]["kernels"]))
    seen = {(g["dtype"], g["tf32"], g["m"], g["n"], g["k"]) for g in kernels["gemm"]}
    seen_att = {json.dumps({k: v for k, v in a.items() if not k.endswith("_s")}, sort_keys=True)
                for a in kernels["attention"]}
    for d in probes[1:]:
        for g in d["kernels"]["gemm"]:
            key = (g["dtype"], g["tf32"], g["m"], g["n"], g["k"])
            if key not in seen:  # the first probe's sample of a shape both timed is kept
                seen.add(key)
                kernels["gemm"].append(g)
        for a in d["kernels"]["attention"]:
            key = json.dumps({k: v for k, v in a.items() if not k.endswith("_s")}, sort_keys=True)
            if key not in seen_att:
                seen_att.add(key)
                kernels["attention"].append(a)
    prov = dict(probes[0]["provenance"])
    prov["driver_version"] = driver
    prov["command"] = " ; ".join(d["provenance"]["command"] for d in probes)
    prov["measurements"] = [p.split("/")[-1] for p in paths]
    doc = {"schema": "shardtune.profile", "schema_version": probes[0]["schema_version"], "name": name,
           "provenance": prov, "kernels": kernels}
    with open(out + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    import os
    os.replace(out + ".tmp", out)
    print(f"{out}: {len(kernels['gemm'])} GEMM, {len(kernels['attention'])} attention, "
          f"{len(kernels['memory'])} memory-bound, {len(kernels['copies'])} copy samples")


if __name__ == "__main__":
    main()
