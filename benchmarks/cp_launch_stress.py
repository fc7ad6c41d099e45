"""Launch the context-parallel worker many times in a row and count clean exits (exit code 0).

torch FSDP2 + CP processes on CPUs sometimes abort at interpreter exit ("terminate called without an
active exception"); longctx.run.cp_worker leaves through a barrier and os._exit(0). This prints how many of
N consecutive launches ended cleanly, with the exit codes of any that did not.

Run: .venv/bin/python benchmarks/cp_launch_stress.py [--launches 30] [--nprocs 2]
"""

import argparse
import tempfile
import time

from longctx import LongctxError
from longctx.run import parallel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=30)
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()
    ok, failures, start = 0, [], time.perf_counter()
    for i in range(args.launches):
        with tempfile.TemporaryDirectory() as out:
            try:
                parallel.launch("cp", args.nprocs, model="tiny", seq_len=args.seq_len, out=out, progress=False)
                ok += 1
            except LongctxError as err:
                failures.append((i, str(err).splitlines()[0]))
        print(f"launch {i + 1}/{args.launches}: {ok} clean so far", flush=True)
    print(
        f"{ok} of {args.launches} launches of CP×{args.nprocs} ended with exit code 0 "
        f"({(time.perf_counter() - start) / args.launches:.1f} s per launch)"
    )
    for i, first_line in failures:
        print(f"  launch {i + 1}: {first_line}")


if __name__ == "__main__":
    main()
