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
"""
import json
import sys


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
