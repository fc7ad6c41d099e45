"""How much of a lesson's time its full-size estimates take, on the fast path and as full traces, measured in one run.

Runs each named lesson once at a size (`longctx run`, into a temporary folder) with every `estimate` call logged
(benchmarks/estimate_log/sitecustomize.py), then repeats each logged call here twice: fast (the default) and
`exact=True` (every layer traced, as before the fast path). The difference of the two sums is what `make` saves in
that lesson. Calls given a config object rather than a preset name are counted in the lesson's log only.

Run on an idle machine: .venv/bin/python benchmarks/lesson_estimates.py 01 03 06 --size cpu
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from longctx.memory.estimate import estimate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--size", default="cpu")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    estimate("tiny", 256)  # imports and first-call set-up, once
    print(f"{'lesson':8s} {'lesson s':>9s} {'calls':>5s} {'fast s':>8s} {'exact s':>8s} {'saved s':>8s}")
    for name in args.notebooks:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "estimates.jsonl"
            env = dict(
                os.environ,
                LONGCTX_ESTIMATE_LOG=str(log),
                PYTHONPATH=os.pathsep.join([str(here / "estimate_log"), os.environ.get("PYTHONPATH", "")]),
            )
            start = time.perf_counter()
            cmd = [sys.executable, "-m", "longctx", "run", name, "--size", args.size, "--out", str(Path(tmp) / "out"), "-q"]
            subprocess.run(cmd, env=env, check=True)
            lesson = time.perf_counter() - start
            calls = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
        fast = exact = 0.0
        for c in calls:
            for flag in (False, True):
                t = time.perf_counter()
                estimate(c["model"], c["seq_len"], **dict(c["kwargs"], exact=flag))
                if flag:
                    exact += time.perf_counter() - t
                else:
                    fast += time.perf_counter() - t
        print(f"{name:8s} {lesson:9.1f} {len(calls):5d} {fast:8.1f} {exact:8.1f} {exact - fast:8.1f}", flush=True)


if __name__ == "__main__":
    main()
