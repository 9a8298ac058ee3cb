#!/usr/bin/env python3
"""Benchmark (not a test): predicted vs measured step time, uncalibrated.

1. The FSDP2 + Hugging Face reference runs measured on an H100
   (tests/data/validation/fsdp2_h100_timing.json, measured 2026-11-22, and the same
   configurations measured again on 2026-11-27 with their host issue times,
   tests/data/validation/fsdp2_h100_host_timing.jsonl: median step time over steps >= 2), and
   the LoRA, frozen-layer and world-1 CPU offload runs of
   tests/data/validation/fsdp2_h100_peft_offload.jsonl. Each
   run's configuration maps onto `shardtune simulate` flags as in
   fsdp2_reference/compare_estimate.py. Runs of world 8 went over the fake process group (no
   communication time), so their prediction is the larger of the compute stream's busy time
   (`compute_s`) and the host's issue time (`time_by_category_s.host_issue`): the step of a
   rank whose collectives cost nothing; world-1 runs compare the whole step.
2. The published cases (../shared/validation/public_cases.json when present, and
   tests/data/validation/*_cases.json: torchtitan's published Llama 3.1 8B FSDP figures) through
   build/tests/bench/validate_cases.

Prints the date, each row's error and the median and worst |error|. Without `--profile` the
predictions use what `simulate` uses by default: the catalog, whose H100-SXM-80G entry ships the
kernel tables `shardtune probe` measured on the lent H100 (profiles/measured/); the README's
figures are these. A profile may be given (`--profile FILE`) to see what another changes.

Usage: python3 tests/bench/step_time_check.py [build/cli/shardtune] [--profile FILE]
"""
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "fsdp2_reference"))
from compare_estimate import flags  # noqa: E402  (the same run -> flags mapping)


def main():
    argv = sys.argv[1:]
    profile = None
    if "--profile" in argv:
        i = argv.index("--profile")
        profile = argv[i + 1]
        del argv[i:i + 2]
    binary = argv[0] if argv else os.path.join(ROOT, "build/cli/shardtune")
    if not os.access(binary, os.X_OK):
        sys.exit(f"step_time_check.py: {binary}: expected the shardtune binary (build it first)")
    timing = os.path.join(ROOT, "tests/data/validation/fsdp2_h100_timing.json")
    doc = json.load(open(timing))
    again = os.path.join(ROOT, "tests/data/validation/fsdp2_h100_host_timing.jsonl")
    for line in open(again):
        run = json.loads(line)
        run["measured_on"] = run["env"]["date_utc"][:10]
        doc["runs"].append(run)
    # The PEFT, frozen-layer and CPU offload runs measured 2026-11-22 (LoRA through peft, layers
    # frozen by requires_grad, CPUOffloadPolicy(pin_memory=True)). The world-8 offload run went
    # over the fake process group in one host process, so its host AdamW had the whole host to
    # itself where the simulated node shares the host among 8 ranks: left out.
    peft = os.path.join(ROOT, "tests/data/validation/fsdp2_h100_peft_offload.jsonl")
    for line in open(peft):
        run = json.loads(line)
        c = run["config"]
        if c.get("offload") and c["world"] > 1:
            continue
        run["measured_on"] = "2026-11-22"
        doc["runs"].append(run)
    print(f"step time, predicted vs measured, {datetime.date.today().isoformat()}, "
          f"profile {profile or 'none (the catalog: measured kernel tables where gpus.json has them, H100-SXM-80G)'}")
    print(f"FSDP2 references: {doc['machine']}, measured {doc['date']}")
    print("| run | measured (s) | predicted (s) | error |")
    print("| --- | --- | --- | --- |")
    errors = []
    for run in doc["runs"]:
        c = run["config"]
        times = [s["time_s"] for s in run["steps"] if s["step"] >= 2]
        measured = run.get("steady_step_time_s_median") or statistics.median(times)
        cmd = [binary, "simulate"] + flags(c, True) + ["--json"]
        if profile:
            cmd += ["--profile", profile]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"| {c['model']} w{c['world']} mb{c['mb']} | {measured:.4f} | error: "
                  f"{out.stderr.strip()} | |")
            continue
        j = json.loads(out.stdout)
        predicted = (j["step_time_s"] if c["world"] == 1 else
                     max(j["compute_s"], j["time_by_category_s"]["host_issue"]))
        err = 100.0 * (predicted - measured) / measured
        errors.append(err)
        name = (f"{c['model']} w{c['world']} mb{c['mb']} S{c['seq']} ckpt {c['ckpt']} "
                f"{c.get('optim', 'foreach')}" + ("" if c.get("reshard", 1) else " no-reshard") +
                (" (fake PG: compute or host)" if c["world"] > 1 else "") +
                (" offload all" if c.get("offload") else "") +
                (f" LoRA r{c['lora_rank']} {c['lora_targets']}" if c.get("lora_rank") else "") +
                (f" layers 0-{c['freeze_layers'] - 1} frozen" if c.get("freeze_layers", -1) >= 0 else "") +
                (" bf16 base" if c.get("base_dtype", "fp32") != "fp32" else "") +
                (f", measured {run['measured_on']}" if "measured_on" in run else ""))
        print(f"| {name} | {measured:.4f} | {predicted:.4f} | {err:+.1f}% |")
    if errors:
        print(f"FSDP2 references: median |error| {statistics.median(abs(e) for e in errors):.1f}%, "
              f"worst {max(errors, key=abs):+.1f}% over {len(errors)} runs")
    cases = [os.path.join(ROOT, "..", "shared", "validation", "public_cases.json")]
    cases = [p for p in cases if os.path.exists(p)]
    cases += sorted(glob.glob(os.path.join(ROOT, "tests", "data", "validation", "*_cases.json")))
    bench = os.path.join(os.path.dirname(binary), "..", "tests", "bench", "validate_cases")
    if cases and os.access(bench, os.X_OK):
        print("\nPublished cases (validate_cases):")
        out = subprocess.run([bench] + cases, capture_output=True, text=True)
        print(out.stdout.rstrip())
    elif not cases:
        print("\nPublished cases: no case file found (left out)")


if __name__ == "__main__":
    main()
