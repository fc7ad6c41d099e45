"""The wheels the GPU check needs on the borrowed GPU machine, computed, not hand-listed.

That machine has no package index; its python3 (3.12) already holds torch and much else
(benchmarks/device/image-packages.txt). This walks the `Requires-Dist` closure of the project's own
dependencies (pyproject.toml), as markers evaluate on CPython 3.12 / Linux x86_64, at the versions this
environment tested (the project's .venv: run it with .venv/bin/python), and keeps a package from the image
only where the image's version is known and satisfies every requirement on it — or, with its version
unknown, where every requirement is a lower bound at most (listed as assumed). Everything else is
downloaded as a wheel for that machine (`pip download --no-deps` with explicit --python-version,
--implementation, --abi and --platform flags) into .whl/, with .whl/manifest.json saying why each is there.
torch is never carried: the check measures the image's own CUDA build.

    .venv/bin/python benchmarks/gpu_wheels.py [--dest .whl] [--image benchmarks/device/image-packages.txt]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
IMAGE = REPO / "benchmarks" / "device" / "image-packages.txt"
PYTHON = "3.12"
# CPython 3.12 on Linux x86_64 with glibc 2.39 (the image's Ubuntu 24.04): every manylinux tag it accepts
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(39, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
ABIS = ["cp312", "abi3", "none"]
NEVER_CARRIED = {"torch"}  # measured as the image has it
UPPER = {"<", "<=", "==", "===", "~=", "!="}


def image_packages(path: Path = IMAGE) -> dict[str, Version | None]:
    """name → version (None where the list gives the name alone)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = Version(version) if version else None
    return found


def target_environment(image: dict) -> dict:
    env = default_environment()
    full = str(image.get("python") or f"{PYTHON}.0")
    env.update(
        python_version=PYTHON,
        python_full_version=full,
        implementation_version=full,
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        platform_machine="x86_64",
        os_name="posix",
    )
    return env


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # the project's own torch pin is set aside: the check measures the image's torch (others' bounds still hold)
    return [r for r in map(Requirement, project["dependencies"]) if canonicalize_name(r.name) not in NEVER_CARRIED]


def closure(image: dict) -> dict:
    """Walk the requirements from the project's own: {"carry": {name: version}, "image": {name: why},
    "why": {name: [requirement, ...]}}."""
    env = target_environment(image)
    wanted: dict[str, list[Requirement]] = {}
    carry, from_image, queue = {}, {}, list(project_requirements())
    while queue:
        req = queue.pop()
        if req.marker and not req.marker.evaluate({**env, "extra": ""}):
            continue
        name = canonicalize_name(req.name)
        wanted.setdefault(name, []).append(req)
        specs = [r.specifier for r in wanted[name]]
        if name in image and name not in carry:
            have = image[name]
            if have is not None and all(s.contains(have, prereleases=True) for s in specs):
                from_image[name] = f"image {have}"
                continue
            if have is None and all(sp.operator not in UPPER for s in specs for sp in s):
                from_image[name] = "image (version not listed; every requirement is a lower bound at most)"
                continue
            if name in NEVER_CARRIED:
                raise SystemExit(f"gpu_wheels: the image's {name} {have} does not satisfy {', '.join(map(str, wanted[name]))}")
        from_image.pop(name, None)
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(
                f"gpu_wheels: {name} ({', '.join(map(str, wanted[name]))}) is needed on Python {PYTHON} but not installed "
                "in this environment: run this script with the project's .venv/bin/python after `make`."
            ) from None
        if not all(s.contains(version, prereleases=True) for s in specs):
            raise SystemExit(
                f"gpu_wheels: this environment's {name} {version} does not satisfy {', '.join(map(str, wanted[name]))}"
            )
        if name not in carry:
            carry[name] = version
            queue += [Requirement(r) for r in metadata.requires(name) or []]
    return {"carry": dict(sorted(carry.items())), "image": dict(sorted(from_image.items())), "why": wanted}


def download(carry: dict, dest: Path) -> None:
    flags = ["--no-deps", "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp"]
    flags += [f for abi in ABIS for f in ("--abi", abi)] + [f for p in PLATFORMS for f in ("--platform", p)]
    pins = [f"{name}=={version}" for name, version in carry.items()]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", *flags, "-d", str(dest), *pins], check=True
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", default=str(REPO / ".whl"), help="folder for the wheels (default .whl/, git-ignored)")
    ap.add_argument("--image", default=str(IMAGE), help="the machine's package list")
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    image = image_packages(Path(args.image))
    walk = closure(image)
    dest.mkdir(parents=True, exist_ok=True)
    stale = [w for w in dest.glob("*.whl") if canonicalize_name(w.name.split("-")[0]) not in walk["carry"]]
    for w in stale:  # a wheel no longer in the closure would be installed beside the right ones
        w.unlink()
    download(walk["carry"], dest)
    wheels = sorted(dest.glob("*.whl"))
    names = [canonicalize_name(w.name.split("-")[0]) for w in wheels]
    doubles = sorted({n for n in names if names.count(n) > 1})
    if doubles:  # two versions of one package stop the whole install there
        raise SystemExit(f"gpu_wheels: {dest} holds two versions of {', '.join(doubles)}: remove the older wheels")
    manifest = {
        "python": PYTHON,
        "carried": {n: {"version": v, "required_by": sorted({str(r) for r in walk["why"][n]})} for n, v in walk["carry"].items()},
        "from_image": {
            n: {"why": why, "requirements": sorted({str(r.specifier) for r in walk["why"][n] if str(r.specifier)})}
            for n, why in walk["image"].items()
        },
        "wheels": {w.name: w.stat().st_size for w in wheels},
        "bytes": sum(w.stat().st_size for w in wheels),
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    for name, why in walk["image"].items():
        if "not listed" in why:
            print(f"  assumed from the image: {name} ({', '.join(sorted({str(r) for r in walk['why'][name]}))})")
    print(f"{len(wheels)} wheels, {manifest['bytes'] / 2**20:.1f} MiB → {dest} ({len(walk['image'])} packages from the image)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
