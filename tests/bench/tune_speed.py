#!/usr/bin/env python3
"""Benchmark (not a test): whole-process wall time of `shardtune tune` (issue #18's cases).

Each case runs as a user runs it, the process start, preset lookup, search, allocator replay of
the listed plans and the text report included, pinned to one core (`taskset -c 0`, `--jobs 1`) and
then with `--jobs 2` on two cores. Prints the date, the machine, each case's median wall time
over REPEATS runs, plans/s (enumerated plans over the median), the search's own work counts
from `--json` (`work`) and the peak resident memory of one more run (GNU time). The README's tune speed figures are this script's output.

Usage: python3 tests/bench/tune_speed.py [path/to/shardtune] [--repeats N] [--moe]
(--moe adds an MoE case, run once per jobs setting: it takes about a minute.)
"""
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

CASES = [
    # (label, arguments)
    ("llama3-8b on 8xH100 (README example)",
     ["--model", "llama3-8b", "--cluster", "8xH100", "--global-batch", "64", "--seq-len", "8192"]),
    ("llama2-70b on 16x8xH100",
     ["--model", "llama2-70b", "--cluster", "16x8xH100", "--global-batch-tokens", "16777216",
      "--seq-len", "8192"]),
    ("llama3-405b on 16x8xH100",
     ["--model", "llama3-405b", "--cluster", "16x8xH100", "--global-batch-tokens", "16777216",
      "--seq-len", "8192"]),
]

# With --moe: an MoE model, outside issue #18's targets and far slower (its per-expert tensors
# make every allocator replay long, and most plans simulated fail theirs), once per jobs setting.
MOE_CASES = [
    ("qwen3-30b-a3b on 8xH100 (MoE, --moe: one run)",
     ["--model", "qwen3-30b-a3b", "--cluster", "8xH100", "--global-batch", "64", "--seq-len",
      "4096"]),
]


def run_once(binary, args, jobs, pin):
    cmd = [binary, "tune"] + args + ["--jobs", str(jobs), "--json"]
    if pin and shutil.which("taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"tune_speed.py: {' '.join(cmd)} failed ({proc.returncode}): {stderr.strip()}")
    return wall, json.loads(stdout)["work"]


def peak_rss_mib(binary, args, jobs):
    """Peak resident set of one `tune` run (GNU time's %M, KiB), in MiB."""
    if not shutil.which("/usr/bin/time"):
        return float("nan")
    cmd = ["/usr/bin/time", "-f", "%M", binary, "tune"] + args + ["--jobs", str(jobs), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return int(out.stderr.strip().splitlines()[-1]) / 1024


def main():
    argv = sys.argv[1:]
    repeats = 3
    if "--repeats" in argv:
        i = argv.index("--repeats")
        repeats = int(argv[i + 1])
        del argv[i:i + 2]
    moe = "--moe" in argv
    if moe:
        argv.remove("--moe")
    binary = argv[0] if argv else "build/cli/shardtune"
    if not os.access(binary, os.X_OK):
        sys.exit(f"tune_speed.py: {binary}: expected the shardtune binary (build it first)")
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    print(f"tune speed, {datetime.date.today().isoformat()}, {cpu}, {os.cpu_count()} cores, "
          f"median of {repeats}")
    print("| case | jobs | wall (s) | plans | plans/s | walked (of them for time bounds) | ruled out "
          "unwalked by time | replayed | simulated | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    cases = [(label, args, repeats) for label, args in CASES]
    if moe:
        cases += [(label, args, 1) for label, args in MOE_CASES]
    for label, args, runs in cases:
        for jobs, pin in ((1, True), (2, False)):
            walls, work = [], None
            for _ in range(runs):
                wall, work = run_once(binary, args, jobs, pin)
                walls.append(wall)
            med = statistics.median(walls)
            rss = peak_rss_mib(binary, args, jobs)
            print(f"| {label} | {jobs}{' (1 core)' if pin else ''} | {med:.3f} | "
                  f"{work['enumerated']:,} | {work['enumerated'] / med:,.0f} | "
                  f"{work['memory_checked']:,} ({work['prewalk_bound_walks']:,}) | "
                  f"{work['pruned_before_walk']:,} | {work['replayed']:,} | {work['simulated']:,} | "
                  f"{rss:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
