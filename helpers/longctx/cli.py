"""The `longctx` command: run notebooks, build data, estimate memory."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import LongctxError


def _cmd_run(args) -> None:
    from . import harness

    overrides = harness.parse_overrides(args.param or [])
    r = harness.run(args.notebook, args.size, overrides, out=args.out, progress=not args.quiet)
    print(f"{r.notebook} ({r.size}) finished in {r.seconds:.1f} s → {r.out / 'results.json'}")


def _cmd_all(args) -> None:
    from . import harness

    harness.run_all(args.size, args.notebooks or None, progress=not args.quiet)


def _cmd_list(args) -> None:
    from . import harness

    for name, path in harness.notebooks().items():
        print(f"{name:28s} sizes: {', '.join(harness.sizes(path))}")


def _cmd_data(args) -> None:
    from . import data

    corpus = data.fetch_corpus()
    tok = data.tokenizer()
    counts = {s: len(data.token_stream(s)) for s in data.SPLITS}
    print(f"corpus: {corpus} ({len(list(corpus.glob('*.txt')))} books); tokenizer vocabulary {len(tok)}; "
          f"tokens: {counts}")


def _cmd_presets(args) -> None:
    from .models import PRESETS

    for p in PRESETS.values():
        print(f"{p.name:16s} {p.description}" + (f"  (weights: {p.hub_id})" if p.hub_id else ""))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="longctx", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="execute one notebook headless at a size")
    p.add_argument("notebook", help="name, number or path, e.g. 00_memory_primer or 00")
    p.add_argument("--size", default="cpu", help="ci | cpu | gpu (default cpu)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="override a notebook parameter")
    p.add_argument("--out", default=None, help="output folder (default build/<notebook>/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("all", help="execute every notebook at a size (the main job)")
    p.add_argument("notebooks", nargs="*", help="a subset (default: all)")
    p.add_argument("--size", default="cpu")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_all)

    sub.add_parser("list", help="the notebooks and their sizes").set_defaults(func=_cmd_list)
    sub.add_parser("presets", help="the model presets").set_defaults(func=_cmd_presets)
    sub.add_parser("data", help="fetch the corpus and train the tokenizer").set_defaults(func=_cmd_data)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except LongctxError as exc:
        print(f"longctx: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
