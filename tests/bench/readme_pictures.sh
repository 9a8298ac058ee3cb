#!/usr/bin/env bash
# The pictures the README shows (issue #19), made by the built shardtune: estimate --plot of the
# default job at 8192 tokens and tune --plot of the README's tune example. With Chromium
# installed (Debian: chromium) it also renders each to PNG beside it under /tmp, to look at.
# Usage: bash tests/bench/readme_pictures.sh [path/to/shardtune]
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:-build/cli/shardtune}"
mkdir -p simulator/doc planner/doc
"$bin" estimate --model llama3-8b --cluster 8xH100 --seq-len 8192 --plot simulator/doc/estimate_llama3-8b_8xH100.svg >/dev/null
"$bin" tune --model llama3-8b --cluster 8xH100 --global-batch 64 --seq-len 8192 --plot planner/doc/tune_llama3-8b_8xH100.svg >/dev/null
echo "$(date -u +%F): simulator/doc/estimate_llama3-8b_8xH100.svg planner/doc/tune_llama3-8b_8xH100.svg"
if command -v chromium >/dev/null; then
  for f in simulator/doc/estimate_llama3-8b_8xH100.svg planner/doc/tune_llama3-8b_8xH100.svg; do
    png="/tmp/$(basename "${f%.svg}").png"
    chromium --headless --no-sandbox --disable-gpu --window-size=1000,680 --screenshot="$png" "file://$PWD/$f" 2>/dev/null
    echo "rendered $png"
  done
fi
