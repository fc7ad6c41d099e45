#!/usr/bin/env bash
# Run the prepared GPU check on a machine with a CUDA GPU and torch + transformers installed.
# TRL (and the exact pins) come from wheels carried in .whl/ (see the device tool's README), e.g.:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl trl==1.16.0 accelerate==1.15.0
set -euo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/helpers${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 benchmarks/gpu_check.py --out "${OUT:-.}/gpu_check.json" "$@"
