"""The `longctx` command: run notebooks, build data, estimate memory."""

from __future__ import annotations

import argparse
import json
import os
import sys

from longctx import versions
from longctx.errors import LongctxError
from longctx.lengths import parse_length
from longctx.models import PRESETS
from longctx.paths import data_dir, notebooks_dir, user_path


def _cmd_run(args) -> None:
    from longctx.run import harness

    overrides = harness.parse_overrides(args.param or [])
    r = harness.run(args.notebook, args.size, overrides, out=args.out, progress=not args.quiet)
    print(f"{r.notebook} ({r.size}) finished in {r.seconds:.1f} s → {r.out / 'results.json'}")


def _cmd_sweep(args) -> None:
    from longctx.run import harness
    from longctx.tools import sweep

    slurm = {k: v for k, v in (("partition", args.partition), ("gpus", args.gpus), ("time", args.time)) if v is not None}
    sw = sweep.Sweep(
        args.notebook, args.size, sweep.parse_grid(args.grid or []), fixed=harness.parse_overrides(args.param or []), out=args.out
    )
    path = sweep.run(sw, executor=args.executor, jobs=args.jobs, slurm=slurm, metric=args.metric, progress=not args.quiet)
    rows = sweep.table(sw)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "oom", "error", "died", "missing")}
    print(f"{len(rows)} points ({', '.join(f'{v} {k}' for k, v in counts.items() if v)}) → {path}")
    if counts["error"] or counts["died"] or counts["missing"]:
        unfinished = counts["error"] + counts["died"] + counts["missing"]
        raise LongctxError(
            f"{unfinished} point(s) did not finish; see point.json under "
            f"{sw.out / 'points'} and re-run the same command to retry them."
        )


def _cmd_figures(args) -> None:
    from longctx.tools import figures

    out = figures.regenerate(args.size, args.out, progress=not args.quiet, force=args.force)
    print(f"{len(figures.GUIDE_FIGURES)} guide figures (PNG + SVG) and index.md → {out}")


def _cmd_pretrain(args) -> None:
    from longctx.levers import base_model

    kwargs = {k: getattr(args, k) for k in base_model.BASE if getattr(args, k, None) is not None}
    out = base_model.pretrain(args.out, progress=not args.quiet, force=args.force, **kwargs)
    print(f"base model → {out} (manifest.json holds its parameters, losses and this command)")


def _cmd_all(args) -> None:
    from longctx.run import harness

    harness.run_all(args.size, args.notebooks or None, progress=not args.quiet)


def _cmd_list(args) -> None:
    from longctx.run import harness, needs

    if args.markdown:
        print(needs.markdown())
        return
    for name, path in harness.notebooks().items():
        print(name)
        for size in harness.SIZES:
            if size in harness.sizes(path) or size == harness.REHEARSAL:
                print(f"  {size:10s} {needs.of(name, size).describe()}")


def _cmd_data(args) -> None:
    from longctx import data

    if args.verify:
        named = os.environ.get("LONGCTX_DATA")
        if named and not user_path(named, "LONGCTX_DATA").is_dir():  # verifying creates nothing
            what = "is a file, not a folder" if user_path(named, "LONGCTX_DATA").exists() else "does not exist"
            raise LongctxError(
                f"LONGCTX_DATA={named} {what}: there is nothing to verify. Build the data in a folder there "
                "with `longctx data`, or unset LONGCTX_DATA to verify the repository's data/."
            )
        problems = data.verify()
        if problems:
            raise LongctxError(
                "the data on disk is not what `longctx data` built:\n  "
                + "\n  ".join(problems)
                + "\nRebuild it with `longctx data --force` (the corpus) or by removing the files named."
            )
        print(f"data verified: {data_dir()}")
        return
    corpus = data.fetch_corpus(force=args.force, download=True)
    tok = data.tokenizer()
    counts = {s: len(data.token_stream(s)) for s in data.SPLITS}
    parquet = data.export_parquet(force=args.force)
    problems = data.verify()
    if problems:
        raise LongctxError("the data on disk is not what `longctx data` built:\n  " + "\n  ".join(problems))
    data.record_built()
    print(
        f"corpus: {corpus} ({len(list(corpus.glob('*.txt')))} books); tokenizer vocabulary {len(tok)}; "
        f"tokens: {counts}; as a parquet dataset (the rehearsal's PG-19 stand-in): {parquet}"
    )


def _cmd_lab(args) -> None:
    import importlib.util
    import os

    from longctx.tools import lab

    if importlib.util.find_spec("jupyterlab") is None:
        raise LongctxError("JupyterLab is not installed in this environment: pip install -e '.[lab]' (or `make lab`).")
    root = user_path(args.folder, "The folder") if args.folder else notebooks_dir()
    if not root.is_dir():
        raise LongctxError(f"{root} is not a folder; give the folder of notebooks to open.")
    try:
        lab.write_settings()
    except OSError as exc:  # an environment this user cannot write to: JupyterLab still starts, with its defaults
        print(
            f"longctx: note: could not write {lab.settings_file()} ({exc.strerror}); JupyterLab may ask about "
            "its news feed once.",
            file=sys.stderr,
        )
    extra = args.jupyter_args[1:] if args.jupyter_args[:1] == ["--"] else args.jupyter_args
    cmd = lab.command(root, *extra)
    os.execv(cmd[0], cmd)  # JupyterLab takes over this process (Ctrl-C stops it the way it always does)


def _cmd_site(args) -> None:
    from longctx.tools import site

    out = site.build(args.size, args.out, progress=not args.quiet)
    print(f"site of the {args.size} run → {out / 'index.html'}")


def _cmd_presets(args) -> None:
    for p in PRESETS.values():
        print(f"{p.name:16s} {p.description}" + (f"  (weights: {p.hub_id})" if p.hub_id else ""))


def _cmd_estimate(args) -> None:
    from longctx.memory import cards
    from longctx.memory.estimate import estimate

    if args.gpu is not None:
        cards.capacity(args.gpu)  # a typo is refused before the estimate runs
    profile = estimate(
        args.model,
        parse_length(args.seq_len),
        loss=args.loss,
        checkpointing=not args.no_checkpointing,
        offload=args.offload,
        dtype=args.dtype,
        batch=args.batch,
        cp_size=args.cp_size,
        mixed_precision=args.mixed_precision,
        device=args.device,
        optim=args.optim,
        attn_implementation=args.attn,
    )
    summary = profile.summary()
    summary["versions"] = versions()
    if args.gpu is not None:
        summary["fit"] = cards.verdict(profile.peak_gib, args.gpu, args.cp_size)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        per = f", per rank of {args.cp_size} (CP)" if args.cp_size > 1 else ""
        print(
            f"{args.model} at {profile.meta['seq_len']:,} tokens{per} ({args.loss} loss, "
            f"checkpointing {'off' if args.no_checkpointing else 'on'}, offload {'on' if args.offload else 'off'}): "
            f"peak {summary['peak_gib']:.2f} GiB ({summary['peak_phase']}), fixed {summary['fixed_gib']:.2f} GiB, "
            f"{summary['saved_layer_tensors']} saved layer inputs of {summary['per_layer_saved_gib']:.4f} GiB, "
            f"host {summary['host_gib']:.2f} GiB; the {args.device.upper()} step ({args.attn} attention, "
            f"{args.optim} AdamW)"
        )
        if summary["attention_mask_gib"] > 0:
            window = summary["sliding_window"]
            print(
                f"note: {summary['attention_mask_gib']:.2f} GiB of the step are (sequence × sequence) attention masks "
                f"that transformers builds for {args.attn}"
                + (f" (sliding window of {window:,} tokens)" if window else "")
                + "; with them the GPU also leaves the flash kernel for the masked one. --attn flash_attention_2 "
                "builds none: estimate with it to see the difference."
            )
        if args.gpu is not None:
            print(f"{args.gpu}: {summary['fit']}")


def _cmd_plan(args) -> None:
    from longctx.memory import cards
    from longctx.memory.plan import plan, table

    gib, how = cards.capacity(args.gpu)
    result = plan(
        args.model,
        parse_length(args.seq_len),
        gpus=args.gpus,
        gpu_memory_gib=gib,
        mixed_precision=args.mixed_precision,
        attn_implementation=args.attn,
        progress=True,  # on stderr: --json's standard output stays the JSON alone
    )
    result["capacity"] = how
    if args.json:
        print(json.dumps(dict(result, versions=versions()), indent=2))
        return
    print(table(result))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="longctx", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="with an error, also print where it was raised")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="execute one notebook headless at a size")
    p.add_argument("notebook", help="name, number or path, e.g. 00_memory_primer or 00")
    p.add_argument("--size", default="cpu", help="ci | cpu | gpu | rehearsal (default cpu; see `longctx list`)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="override a notebook parameter")
    p.add_argument("--out", default=None, help="output folder (default build/<notebook>/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("sweep", help="run a notebook over a parameter grid (resumable), then tabulate")
    p.add_argument("notebook")
    p.add_argument("--size", default="cpu")
    p.add_argument("--grid", action="append", metavar="KEY=V1,V2", help="a swept parameter (repeat for a grid)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="a fixed override for every point")
    p.add_argument("--metric", default=None, help="a results.json key to plot against the first grid key")
    p.add_argument("--executor", default="local", help="local | slurm | slurm-local | slurm-debug (submitit)")
    p.add_argument("--jobs", type=int, default=1, help="local executor: points run at once")
    p.add_argument("--partition", default=None, help="SLURM partition")
    p.add_argument("--gpus", type=int, default=None, help="SLURM GPUs per point")
    p.add_argument("--time", type=int, default=None, help="SLURM time limit per point, minutes")
    p.add_argument("--out", default=None, help="sweep folder (default build/sweeps/<notebook>-<size>/)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("figures", help="regenerate every guide figure into one folder, with an index page")
    p.add_argument("--size", default="cpu")
    p.add_argument("--out", default=None, help="folder (default build/figures/<size>/)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds other files (kept)")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_figures)

    p = sub.add_parser("pretrain", help="train the YaRN lesson's base model (default: data/yarn-base)")
    p.add_argument("--out", default=None, help="folder for the model (default: the committed data/yarn-base)")
    p.add_argument("--force", action="store_true", help="replace the model files in a folder that holds a model")
    p.add_argument("--preset", default=None)
    p.add_argument("--rope-theta", dest="rope_theta", type=float, default=None)
    p.add_argument("--seq-len", dest="seq_len", type=int, default=None, help="the trained length")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--learning-rate", dest="learning_rate", type=float, default=None)
    p.add_argument("--warmup-steps", dest="warmup_steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_pretrain)

    p = sub.add_parser("all", help="execute every notebook at a size (the main job)")
    p.add_argument("notebooks", nargs="*", help="a subset (default: all)")
    p.add_argument("--size", default="cpu")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_all)

    p = sub.add_parser("estimate", help="estimate a training step's memory on fake tensors (no allocation)")
    p.add_argument("--model", required=True, help="preset (qwen3-4b, …), config.json path, model folder or hub id")
    p.add_argument("--seq-len", required=True, help="tokens per sequence: 98304, 96k, 1M")
    p.add_argument("--loss", default="chunked", choices=["chunked", "plain"])
    p.add_argument("--no-checkpointing", action="store_true", help="keep every activation (no recomputation)")
    p.add_argument("--offload", action="store_true", help="offload checkpointed layer inputs to host memory")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32", "fp16"])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cp-size", type=int, default=1, help="context parallelism over N GPUs: the estimate is per rank")
    p.add_argument(
        "--mixed-precision",
        action="store_true",
        help="fp32 master weights and optimizer state, bf16 compute (FSDP2; needs --cp-size > 1)",
    )
    # the choices are checked (and listed) by the estimator itself, which this parser does not import
    p.add_argument(
        "--device", default="cuda", help="whose kernels the step runs: cuda (default; the GPU's, emulated on fake tensors) or cpu"
    )
    p.add_argument(
        "--optim",
        default="fused",
        help="AdamW implementation: fused (the Trainer's default adamw_torch_fused), foreach, for-loop",
    )
    p.add_argument("--attn", default="sdpa", help="transformers' attn_implementation: sdpa, flash_attention_2, eager")
    p.add_argument(
        "--gpu",
        default=None,
        help="say whether the peak fits a card (H100-80GB, A100-80GB, A100-40GB, L40S, H200) or a number "
        "of GiB, and what the estimate does not count",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_estimate)

    p = sub.add_parser("plan", help="add the levers one by one until a sequence fits the GPUs")
    p.add_argument("--model", required=True, help="preset or config.json path (any model family)")
    p.add_argument("--seq-len", required=True, help="tokens: 98304, 96k, 1M")
    p.add_argument("--gpus", type=int, default=1, help="GPUs available for context parallelism (power of two)")
    p.add_argument(
        "--gpu",
        "--gpu-memory",
        dest="gpu",
        default="H100-80GB",
        help="each GPU: a card (H100-80GB, A100-80GB, A100-40GB, L40S, H200; its driver-reported total) "
        "or a number of GiB (default H100-80GB)",
    )
    p.add_argument("--mixed-precision", action="store_true", help="CP steps keep fp32 master weights (FSDP2)")
    p.add_argument(
        "--attn", default="sdpa", help="attn_implementation of the one-GPU steps: sdpa, flash_attention_2, eager (CP runs sdpa)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_plan)

    p = sub.add_parser("list", help="the notebooks, their sizes and what each size needs")
    p.add_argument("--markdown", action="store_true", help="the table the README carries")
    p.set_defaults(func=_cmd_list)
    sub.add_parser("presets", help="the model presets").set_defaults(func=_cmd_presets)
    p = sub.add_parser("site", help="a static HTML site of the executed lessons (nothing is run)")
    p.add_argument("--size", default="cpu", help="the runs to publish: those `longctx run`/`make` made at this size")
    p.add_argument("--out", default=None, help="folder (default build/site/<size>/); replaced whole on a rebuild")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=_cmd_site)
    p = sub.add_parser("lab", help="JupyterLab on the lessons: no news pop-up, this environment's kernel")
    p.add_argument("folder", nargs="?", default=None, help="folder to open (default: the notebooks)")
    p.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="after --: options for JupyterLab itself")
    p.set_defaults(func=_cmd_lab)
    p = sub.add_parser("data", help="fetch the corpus (hash checked), train the tokenizer, verify what is on disk")
    p.add_argument("--verify", action="store_true", help="only check the archive, books, tokenizer and token caches")
    p.add_argument("--force", action="store_true", help="unpack the corpus again from the verified archive")
    p.set_defaults(func=_cmd_data)
    return parser


def signal_default_pipe() -> None:
    """`longctx list | head -1`: end quietly when the reader goes away, as command-line tools do."""
    import signal

    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        signal_default_pipe()
        if getattr(args, "out", None) == "":  # an empty --out would silently mean the default folder
            raise LongctxError("--out is empty: name a folder, or leave --out out for the default.")
        args.func(args)
    except KeyboardInterrupt:
        import logging

        logging.getLogger("asyncio").disabled = True  # a dead kernel's pending tasks would report it at exit
        print(
            "longctx: interrupted. Finished work is kept (a sweep's finished points, a run's earlier outputs); "
            "run the same command again to go on.",
            file=sys.stderr,
        )
        return 130
    except LongctxError as exc:
        if args.debug:
            import traceback

            traceback.print_exc()
        print(f"longctx: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the output itself cannot be written: `longctx list > /dev/full`, a full disk
        import errno

        if exc.errno not in (errno.ENOSPC, errno.EIO, errno.EDQUOT) or args.debug:
            raise
        _discard_stdout()
        where = f" {exc.filename}" if exc.filename else " the output"
        print(f"longctx: error: could not write{where}: {exc.strerror}. Free space or write elsewhere.", file=sys.stderr)
        return 1
    return 0


def _discard_stdout() -> None:
    """What stdout still holds goes nowhere, so the interpreter's last flush does not fail a second time."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
