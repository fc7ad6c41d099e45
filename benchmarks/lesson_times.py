"""Each lesson's measured wall time against the minutes notebooks/params/needs.yaml promises for its size.

Reads the results.json that `make`, `longctx run` or the tests left under build/ (or --build), so it times
nothing itself: run it right after the runs it reads. A ratio above 1 is a broken promise: raise the
minutes in needs.yaml (and the README table, which a test keeps equal to it) or make the size cheaper.

Run: .venv/bin/python benchmarks/lesson_times.py [--build DIR]
"""

import argparse
import json
from pathlib import Path

from longctx.paths import build_dir
from longctx.run import harness, needs


def rows(build: Path) -> list[dict]:
    found = []
    for name in harness.notebooks():
        path = build / name / "results.json"
        if not path.is_file():
            continue
        results = json.loads(path.read_text())
        size = results.get("size")
        if size not in harness.SIZES or "seconds" not in results:
            continue
        promised = needs.of(name, size).minutes * 60
        found.append(
            {
                "notebook": name,
                "size": size,
                "seconds": results["seconds"],
                "promised_seconds": promised,
                "ratio": results["seconds"] / promised,
                "finished": results.get("finished", "?"),
            }
        )
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=None, help="the build folder to read (default: build/)")
    args = ap.parse_args()
    table = rows(args.build or build_dir())
    if not table:
        print("no results.json under the build folder: run `make` (or `longctx run`) first")
        return
    print(f"{'notebook':26s} {'size':9s} {'measured s':>10s} {'promised s':>10s} {'ratio':>6s}  finished")
    for r in table:
        flag = "  over" if r["ratio"] > 1 else ""
        print(
            f"{r['notebook']:26s} {r['size']:9s} {r['seconds']:10.0f} {r['promised_seconds']:10.0f} "
            f"{r['ratio']:6.2f}  {r['finished']}{flag}"
        )


if __name__ == "__main__":
    main()
