#!/usr/bin/env bash
# The GPU validation command (benchmarks/gpu_check.py), from a clean checkout on a machine with one CUDA GPU.
#
# Where the project's environment exists (`make` ran there), it uses .venv/. Elsewhere — a GPU machine whose
# python3 already holds torch and transformers but cannot reach a package index — the missing packages come
# as wheels in .whl/, fetched beforehand on a machine that can (match the GPU machine's Python, e.g. 3.12):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#       trl==1.16.0 accelerate==1.15.0 transformers==5.24.0 datasets papermill nbformat nbclient ipykernel \
#       jupyter_client jupyter_core traitlets pyzmq tornado comm debugpy ipython
# and the data `make data` built (git-ignored) travels with the checkout: data/corpus, data/tokenizer-4096,
# data/tokens-4096-*.npy, data/corpus-parquet.
#
#   benchmarks/gpu_check.sh [--skip-notebooks]      # writes into $OUT (or build/gpu_check/)
#   benchmarks/gpu_check.sh --dry-run               # any machine, no GPU: builds every step, checks every input
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then
  PY=.venv/bin/python
else
  PY=python3
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  export PYTHONPATH=$PWD/helpers${PYTHONPATH:+:$PYTHONPATH}
  # the notebooks' kernel is this python3 (papermill starts the kernel named python3)
  python3 -m ipykernel install --user --name python3 >/dev/null 2>&1 || true
fi
export PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu_check.py --out "${OUT:-build/gpu_check}" "$@"
