#!/usr/bin/env bash
# The GPU validation command on one CUDA GPU, one phase per command (benchmarks/gpu_check.py says what each
# measures and its budget; each ends well inside a 10-minute command):
#   benchmarks/gpu_check.sh measure      # (a) tracker vs allocator, (b) estimate vs allocator, (c) a snapshot
#   benchmarks/gpu_check.sh notebooks    # (d) notebooks 00, 01, 03 at the gpu size, trimmed
#   benchmarks/gpu_check.sh time         # (e) steps timed beside the time model's prediction for this card
#   benchmarks/gpu_check.sh dry-run      # any machine, no GPU: every step built on fake tensors, every input checked
# Reports: build/gpu_check/gpu_check.{json,md}, rewritten after every case; copied to $OUT where it is set.
# Where no .venv exists, the wheels in .whl/ are used (benchmarks/gpu_env.sh; the README's "Before a GPU run").
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-}
case "$phase" in
  measure) limit=390 ;;
  notebooks) limit=540 ;;
  time) limit=480 ;;
  dry-run) limit=600 ;;
  *) echo "usage: benchmarks/gpu_check.sh measure|notebooks|time|dry-run [gpu_check.py options]" >&2; exit 2 ;;
esac
source benchmarks/gpu_env.sh
# the phase keeps to its own budget; this stops it past that, its reports already written case by case
exec timeout --kill-after=15 "$limit" "$PY" benchmarks/gpu_check.py "$@"
