#!/usr/bin/env bash
# The GPU check's first try, rehearsed on this CPU machine: a Python 3.12 environment with the GPU machine's
# image versions of what the check imports (benchmarks/device/image-packages.txt; torch 2.11.0 from the
# package index — a CUDA build, run here on the CPU — in place of the image's 2.11.0+cu130), then only what
# would travel — the tracked tree, the wheels in .whl/ and the two data folders the check reads, copied
# apart — installed the way gpu_check.sh installs it there, and run: the dry run of the check, and notebook
# 01 at the ci size through papermill with that interpreter's kernel. It prints the size of what
# would travel (the lease takes 64 MiB). Needs the project's environment (`make data`) and the package index.
#   benchmarks/device_rehearsal.sh            # into build/device-rehearsal/ (REHEARSAL_DIR moves it)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(realpath -m "${REHEARSAL_DIR:-build/device-rehearsal}")
carry=(.whl data/corpus data/tokenizer-4096)  # what the device tool's `carry` names beside the tree
[ -x .venv/bin/python ] || { echo "device_rehearsal: run 'make data' first (it builds .venv and the corpus)" >&2; exit 2; }
py312=""
for c in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then py312=$c; break; fi
done
[ -n "$py312" ] || { echo "device_rehearsal: no Python 3.12 here (the GPU machine's); install one (pyenv, apt)" >&2; exit 2; }
t0=$SECONDS
step() { printf '\n== %s (%d s)\n' "$1" $((SECONDS - t0)); }

step "the wheels for the GPU machine (benchmarks/gpu_wheels.py)"
.venv/bin/python benchmarks/gpu_wheels.py 2>&1 | grep -v "^WARNING: Location"

step "a Python 3.12 copy of the image's packages that the check imports → $work/image"
mkdir -p "$work"
pins=$(.venv/bin/python - <<'PY'
import json, sys
sys.path.insert(0, "benchmarks")
from gpu_wheels import image_packages
from packaging.utils import canonicalize_name
image = image_packages()
manifest = json.load(open(".whl/manifest.json"))
pins = [f"torch=={image['torch']}"]
for name, why in manifest["from_image"].items():
    have = image[canonicalize_name(name)]
    # a listed version is installed as listed; an unlisted one as the newest release every requirement allows
    pins.append(f"{name}=={have}" if have else f"{name}{','.join(why['requirements'])}")
for name in manifest["carried"]:  # the image's own copy of a carried package, shadowed there as it will be here
    if image.get(canonicalize_name(name)):
        pins.append(f"{name}=={image[canonicalize_name(name)]}")
print(" ".join(pins))
PY
)
if [ "$(cat "$work/image/.pins" 2>/dev/null)" != "$pins" ]; then
  [ -x "$work/image/bin/python" ] || "$py312" -m venv "$work/image"
  # shellcheck disable=SC2086
  "$work/image/bin/pip" install -q --disable-pip-version-check $pins 2>&1 | grep -v "^WARNING: Location" || true
  echo "$pins" > "$work/image/.pins"
fi
"$work/image/bin/python" -c 'import sys, torch, transformers, accelerate; print("python", sys.version.split()[0], "| torch", torch.__version__, "| transformers (image)", transformers.__version__, "| accelerate", accelerate.__version__)'

step "what travels: the tree (tracked and untracked-not-ignored files) and ${carry[*]} → $work/tree"
rm -rf "$work/tree" "$work/site" "$work/out"
mkdir -p "$work/tree"
git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} "$work/tree/" 2>/dev/null || true
for c in "${carry[@]}"; do cp -r --parents "$c" "$work/tree/"; done
bytes=$(du -sb "$work/tree" | cut -f1)
echo "travels: $((bytes / 1048576)) MiB of 64 ($(du -sb .whl | cut -f1 | awk '{printf "%.1f", $1/1048576}') MiB of wheels)"
[ "$bytes" -le $((64 * 1048576)) ] || { echo "device_rehearsal: over the 64 MiB a lease carries" >&2; exit 1; }

cd "$work/tree"
export LONGCTX_IMAGE_PYTHON=$work/image/bin/python LONGCTX_SITE=$work/site
step "gpu_check.sh dry-run with that interpreter and only the carried wheels"
benchmarks/gpu_check.sh dry-run --out "$work/out/gpu_check" | tail -n 14

step "notebook 01 at the ci size through papermill, that interpreter's kernel"
(
  source benchmarks/gpu_env.sh
  "$PY" -m longctx run 01 --size ci --quiet --out "$work/out/01_chunked_loss"
  "$PY" - "$work/out/01_chunked_loss/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
v = r.get("versions", {})
print("ran with torch", v.get("torch"), "| transformers", v.get("transformers"), "| trl", v.get("trl"), "| accelerate", v.get("accelerate"))
PY
)
step "passed: the check's dry run and a notebook ran with only what travels"
cd "$repo"
