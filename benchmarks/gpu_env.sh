# Sourced by gpu_check.sh and device_rehearsal.sh: the Python the GPU check runs with, in $PY.
# In the project's environment (.venv/, where `make` ran) that is .venv/bin/python. Elsewhere — a borrowed
# GPU machine whose python3 holds torch but reaches no package index — the wheels benchmarks/gpu_wheels.py
# put in .whl/ are installed once into $LONGCTX_SITE (default /tmp/longctx-site) and put before the image's
# own packages on the path, with the package itself (helpers/).
if [ -x .venv/bin/python ] && [ -z "${LONGCTX_IMAGE_PYTHON:-}" ]; then
  PY=.venv/bin/python
else
  PY=${LONGCTX_IMAGE_PYTHON:-python3}
  site=${LONGCTX_SITE:-/tmp/longctx-site}
  stamp="$site/.installed-$(cat .whl/manifest.json 2>/dev/null | cksum | cut -d' ' -f1)"
  if [ ! -f "$stamp" ]; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "gpu_check: error: no wheels in .whl/: run '.venv/bin/python benchmarks/gpu_wheels.py' where the package index is reachable, and carry .whl with the tree" >&2
      exit 2
    fi
    rm -rf "$site"
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl
    touch "$stamp"
  fi
  export PYTHONPATH=$site:$PWD/helpers${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
