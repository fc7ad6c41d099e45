"""The `longctx` command: run notebooks, build data, estimate memory."""

import argparse
import contextlib
import importlib.util
import json
import logging
import math
import os
import re
import signal
import sys
import traceback
from functools import partial

import psutil

from longctx import children, pretrain, versions
from longctx.errors import LongctxError
from longctx.lengths import parse_length
from longctx.memory import cards, kernels, timing
from longctx.memory import estimate as est
from longctx.models import DTYPE_NAMES, HUB_ID, PRESETS
from longctx.paths import data_dir, notebooks_dir, user_path
from longctx.run import needs
from longctx.tools import figures, lab, site, sweep
from longctx.train import LOSSES

CARDS = f"a card ({', '.join(cards.CARDS)}; its driver-reported total, else its datasheet's) or a number of GiB"


def _cmd_run(args) -> None:
    from longctx.run import harness

    if args.command == "all":  # every notebook (or those named), each into build/<notebook>/
        harness.run_all(args.size, args.notebooks or None, progress=not args.quiet, timeout=args.timeout)
        return
    overrides = harness.parse_overrides(args.param)
    r = harness.run(args.notebook, args.size, overrides, out=args.out, progress=not args.quiet, timeout=args.timeout)
    print(f"{r.notebook} ({r.size}) finished in {r.seconds:.1f} s → {r.out / 'results.json'}")


def _cmd_sweep(args) -> None:
    from longctx.run import harness

    slurm = {k: getattr(args, k) for k in ("partition", "gpus", "time", "account", "qos", "mem", "cpus_per_task")}
    fixed = harness.parse_overrides(args.param)
    sw = sweep.Sweep(args.notebook, args.size, sweep.parse_grid(args.grid), fixed=fixed, out=args.out, timeout=args.timeout)
    path = sweep.run(sw, executor=args.executor, jobs=args.jobs, slurm=slurm, metric=args.metric, progress=not args.quiet)
    rows = sweep.table(sw)
    kinds = ("ok", "oom", "timed out", "error", "died", "cancelled", "refused", "missing")
    counts = {s: sum(r["status"] == s for r in rows) for s in kinds}
    print(f"{len(rows)} points ({', '.join(f'{v} {k}' for k, v in counts.items() if v)}) → {path}")
    if counts["timed out"]:
        print(f"longctx: {counts['timed out']} point(s) ran past the {sw.limit:g}-minute limit and were stopped; a longer "
              "--timeout runs them again (the same command keeps them as timed out).", file=sys.stderr)  # fmt: skip
    said = [
        f"{counts['refused']} point(s) were refused where they ran, before their kernel: sweep.csv's reason column says "
        "why; change what it names" if counts["refused"] else "",
        f"{n} point(s) did not finish (see point.json under {sw.out / 'points'}); the same command retries them"
        if (n := counts["error"] + counts["died"] + counts["cancelled"]) else "",
        f"{counts['missing']} point(s) left no record (their logs are under {sw.out / 'submitit'}); the same command "
        "runs them again" if counts["missing"] else "",
    ]  # fmt: skip
    if said := [s for s in said if s]:
        raise LongctxError("; ".join(said) + ".")


def _cmd_figures(args) -> None:
    out = figures.regenerate(args.size, args.out, progress=not args.quiet, force=args.force, timeout=args.timeout)
    runs = out / figures.RUNS
    print(f"{len(figures.GUIDE_FIGURES)} guide figures (PNG + SVG) and index.md → {out} (the notebooks ran in {runs})")


def _cmd_pretrain(args) -> None:
    kwargs = {k: getattr(args, k) for k in pretrain.BASE if getattr(args, k) is not None}
    out = pretrain.pretrain(args.out, progress=not args.quiet, force=args.force, **kwargs)
    print(f"base model → {out} (manifest.json holds its parameters, losses and this command)")


def _cmd_list(args) -> None:
    from longctx.run import harness, needs

    if args.markdown:
        print(needs.markdown())
        return
    for name, path in harness.notebooks().items():
        print(name)
        for size in harness.SIZES:
            if size in harness.sizes(path):
                declared = needs.of(name, size)
                print(f"  {size:10s} {declared.describe()}; stopped after {declared.limit_minutes:g} min")


def _cmd_data(args) -> None:
    from longctx import data

    if not args.verify:  # each step keeps what is there (verified below), or builds it again with --force
        books = len(list(data.fetch_corpus(force=args.force, download=True).glob("*.txt")))
        data.tokenizer(force=args.force)
        tokens = {s: len(data.token_stream(s, force=args.force)) for s in data.SPLITS}
        data.export_parquet(force=args.force)  # the ci size's PG-19 stand-in
    if problems := data.verify():
        raise LongctxError(
            "the data on disk is not what `longctx data` built:\n  " + "\n  ".join(problems) + "\nRebuild it with "
            "`longctx data --force` (it replaces only the files it wrote: move any file of your own away yourself)."
        )
    done = "verified" if args.verify else f"built and verified ({books} books, tokens {tokens}, {data.PARQUET_DIR}/)"
    print(f"data {done}: {data_dir()}")


def _cmd_lab(args) -> None:
    if importlib.util.find_spec("jupyterlab") is None:
        raise LongctxError("JupyterLab is not installed in this environment: pip install -e '.[lab]' (or `make lab`).")
    root = user_path(args.folder, "The folder") if args.folder else notebooks_dir()
    try:
        lab.write_settings()
    except OSError as exc:  # an environment this user cannot write to: JupyterLab still starts, with its defaults
        note = f"could not write {lab.settings_file()} ({exc.strerror}); JupyterLab may ask about its news feed once"
        print(f"longctx: note: {note}.", file=sys.stderr)
    cmd = lab.command(root, *(args.jupyter_args[1:] if args.jupyter_args[:1] == ["--"] else args.jupyter_args))
    os.execv(cmd[0], cmd)  # JupyterLab takes over this process (Ctrl-C stops it the way it always does)


def _cmd_site(args) -> None:
    out = site.build(args.size, args.out, progress=not args.quiet)
    print(f"site of the {args.size} run → {out / 'index.html'}")


def _cmd_presets(args) -> None:
    for p in PRESETS.values():
        print(f"{p.name:16s} {p.description}" + (f"  (weights: {p.hub_id})" if p.hub_id else ""))


def _cmd_estimate(args) -> None:
    from longctx.memory.estimate import estimate

    if args.gpu is not None:
        cards.capacity(args.gpu)  # a typo is refused before the estimate runs
    same = ("loss", "offload", "dtype", "batch", "cp_size", "mixed_precision", "device", "optim", "exact", "tiled_mlp", "cp_comm")
    same += ("offload_optimizer", "offload_params", "fused_norm", "sp_size", "autocast")
    kwargs = {k: getattr(args, k) for k in same} | {"checkpointing": not args.no_checkpointing}
    step = partial(estimate, args.model, parse_length(args.seq_len), **kwargs)
    with contextlib.redirect_stdout(sys.stderr), children.time_limit(60 * args.timeout, "The estimate"):  # (DeepSpeed's
        profile = step(attn_implementation=args.attn)  # accelerator line on stdout is not the report)
    summary = {**profile.summary(), "versions": versions()}
    if args.gpu is not None:
        summary["fit"] = cards.verdict(profile.peak_gib, args.gpu, args.cp_size * args.sp_size)
    named = args.gpu if args.gpu is not None and cards.card(args.gpu) else None  # a number of GiB has no speeds
    if args.device == "cuda":  # the GPU's step, priced on the card named (else the guide's)
        summary["time"] = timing.step_time(profile, named or cards.DEFAULT, sdpa=args.sdpa_backend, replicas=args.replicas)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return
    per = f", per rank of {args.cp_size} (CP)" if args.cp_size > 1 else ""
    per += f", per rank of {args.sp_size} (Ulysses SP)" if args.sp_size > 1 else ""
    adamw = "the host's" if args.offload_optimizer else args.optim
    print(
        f"{args.model} at {profile.meta['seq_len']:,} tokens{per} ({args.loss} loss, "
        f"checkpointing {'off' if args.no_checkpointing else 'on'}, offload {'on' if args.offload else 'off'}"
        f"{', tiled MLP' if args.tiled_mlp else ''}{', optimizer on the host' if args.offload_optimizer else ''}"
        f"{', weights on the host' if args.offload_params else ''}{', fused norms' if args.fused_norm else ''}"
        f"{', the forward under bf16 autocast' if summary['autocast'] else ''}): "
        f"peak {summary['peak_gib']:.2f} GiB ({summary['peak_phase']}), fixed {summary['fixed_gib']:.2f} GiB, "
        f"{summary['saved_layer_tensors']} saved layer inputs of {summary['per_layer_saved_gib']:.4f} GiB, "
        f"host {summary['host_gib']:.2f} GiB; the {args.device.upper()} step ({args.attn} attention, {adamw} AdamW)"
    )
    if (mask := summary["attention_mask_gib"]) > 0:
        window = f" (sliding window of {summary['sliding_window']:,} tokens)" if summary["sliding_window"] else ""
        note = f"note: transformers builds (sequence × sequence) attention masks of {mask:.2f} GiB for {args.attn}{window}"
        if args.device == "cuda" and args.dtype != "fp32" and args.cp_size == 1:  # the same step without them, traced
            flash = step(attn_implementation="flash_attention_2").peak_gib
            note += ", and leaves the flash kernel for the masked one: the same step with --attn flash_attention_2 (no masks) "
            note += f"peaks at {flash:.2f} GiB, {summary['peak_gib'] - flash:.2f} GiB less"
        print(note + ".")
    if args.gpu is not None:
        print(f"{args.gpu}: {summary['fit']}")
    if "time" in summary:
        print(f"time: {timing.describe(summary['time'])} (--json gives the FLOPs, bytes, rates and their sources)")
    else:
        print("time: not priced for the CPU's step (--device cpu); the GPU's step is (--device cuda).")


def _cmd_plan(args) -> None:
    from longctx.memory.plan import plan, table

    gib, how = cards.capacity(args.gpu)
    kwargs = {k: getattr(args, k) for k in ("gpus", "mixed_precision", "tiled_mlp", "host_state", "sdpa_backend")}
    kwargs["attn_implementation"] = args.attn
    with contextlib.redirect_stdout(sys.stderr), children.time_limit(60 * args.timeout, "The plan"):  # stdout: the plan
        gpu = args.gpu if cards.card(args.gpu) else gib  # a card's name prices the times on that card
        result = plan(args.model, parse_length(args.seq_len), gpu_memory_gib=gpu, progress=True, exact=args.exact, **kwargs)
    result["capacity"] = how
    print(json.dumps(dict(result, versions=versions()), indent=2) if args.json else table(result))


def positive(text: str) -> float:
    """argparse's type for a count or a duration: a positive number below a million (`int(...)` where a whole one is
    meant); larger ones overflow the timers and counts they feed, and no flag here needs one."""
    value = float(text)  # (argparse says "invalid positive value" for what float() refuses)
    if not (math.isfinite(value) and 0 < value < 1e6):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number below 1,000,000")
    return int(value) if value.is_integer() else value


def count(text: str) -> int:
    """argparse's type for how many of something: a positive whole number."""
    value = positive(text)
    if not isinstance(value, int):
        raise ValueError(text)
    return value


def _flag(*names, **kwargs) -> argparse.ArgumentParser:
    """A parent parser holding one flag that several commands share."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument(*names, **kwargs)
    return parser


def build_parser() -> argparse.ArgumentParser:
    size = _flag("--size", default="cpu", choices=needs.SIZES, help="default cpu; see `longctx list`")
    out = _flag("--out", default=None, help="folder to write (default: the command's own under build/)")
    quiet = _flag("-q", "--quiet", action="store_true", help="no progress bar")
    force = _flag("--force", action="store_true", help="write again over what this command wrote (other files are kept)")
    as_json = _flag("--json", action="store_true", help="print one JSON object")
    timeout = _flag(
        "--timeout", type=positive, default=None, metavar="MINUTES",
        help="stop a notebook (with every process it started) after this many minutes (default: 4 × its size's "
        "minutes + 2; `longctx list` shows both)",
    )  # fmt: skip
    param = _flag("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="set a notebook parameter (repeatable)")
    model = _flag("--model", required=True, help="preset (qwen3-4b, …), config.json path, model folder or hub id")
    model.add_argument("--seq-len", required=True, help="tokens per sequence: 98304, 96k, 1M")
    mixed = _flag("--mixed-precision", action="store_true", help="CP steps keep fp32 master weights (FSDP2; needs --cp-size > 1)")
    attn = _flag("--attn", default="sdpa", choices=est.ATTENTIONS, help="transformers' attn_implementation")
    attn.add_argument("--tiled-mlp", action="store_true", help="ALST's TiledMLP on every layer (plan: a step after offload)")
    attn.add_argument(
        "--sdpa-backend", default=None, choices=kernels.SDPA_BACKENDS,
        help="the kernel SDPA runs, for the time (default: the card's; cuDNN on Hopper, which torch >= 2.9 prefers "
        "with cuDNN > 9.15; flash: FlashAttention-2, as with an older cuDNN or TORCH_CUDNN_SDPA_DEPRIORITIZED=1)",
    )  # fmt: skip

    parser = argparse.ArgumentParser(prog="longctx", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="with an error, also print where it was raised")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, func, help, *parents):
        p = sub.add_parser(name, help=help, parents=parents)
        p.set_defaults(func=func)
        return p

    p = command("run", _cmd_run, "execute one notebook headless at a size", size, param, out, quiet, timeout)
    p.add_argument("notebook", help="name, number or path, e.g. 00_memory_primer or 00")
    p = command(
        "sweep", _cmd_sweep, "run a notebook over a parameter grid (resumable), then tabulate", size, param, out, quiet, timeout
    )
    p.add_argument("notebook")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="a swept parameter (repeat for a grid)")
    p.add_argument("--metric", default=None, help="a results.json key to plot against the first grid key")
    p.add_argument("--executor", default="local", choices=sweep.EXECUTORS, help="local, or SLURM through submitit")
    p.add_argument("--jobs", type=positive, default=1, help="local executor: points run at once")
    p.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's)")
    p.add_argument("--gpus", type=positive, default=None, help="SLURM GPUs per point")
    p.add_argument("--time", type=positive, default=None, help="SLURM time limit per point, minutes (default 60)")
    p.add_argument("--account", default=None, help="SLURM account to charge")
    p.add_argument("--qos", default=None, help="SLURM quality of service")
    p.add_argument("--mem", type=positive, default=None, help="SLURM memory per point, GB")
    p.add_argument("--cpus-per-task", type=positive, default=None, help="SLURM CPU cores per point")
    what = "regenerate every guide figure into one folder, with an index page"
    command("figures", _cmd_figures, what, size, out, force, quiet, timeout)
    p = command("pretrain", _cmd_pretrain, "train the YaRN lesson's base model (default --out data/yarn-base)", out, force, quiet)
    for key, value in pretrain.BASE.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool):  # a switch: --answer-only / --no-answer-only
            p.add_argument(flag, dest=key, action=argparse.BooleanOptionalAction, default=None, help=f"default {value}")
        else:
            choices = pretrain.SCHEDULERS if key == "scheduler" else None
            p.add_argument(flag, dest=key, type=type(value), default=None, choices=choices,
                           help=pretrain.SAID.get(key, f"default {value!r}"))  # fmt: skip
    p = command("all", _cmd_run, "execute every notebook at a size (the main job)", size, quiet, timeout)
    p.add_argument("notebooks", nargs="*", help="a subset (default: all)")
    limit = _flag("--timeout", type=positive, default=15, metavar="MINUTES", help="stop after this many minutes (default 15)")
    what = "estimate a training step's memory on fake tensors"
    p = command("estimate", _cmd_estimate, what, model, mixed, attn, as_json, limit)
    p.add_argument("--loss", default="chunked", choices=LOSSES)
    p.add_argument("--no-checkpointing", action="store_true", help="keep every activation (no recomputation)")
    p.add_argument("--offload", action="store_true", help="offload checkpointed layer inputs to host memory")
    p.add_argument("--offload-optimizer", action="store_true", help="AdamW's state and fp32 weights on the host, its "
                   "step there (DeepSpeed ZeRO's offload_optimizer: cpu)")  # fmt: skip
    p.add_argument("--offload-params", action="store_true", help="the layers' weights on the host too, fetched per layer "
                   "(ZeRO-3's offload_param: cpu; needs --offload-optimizer)")  # fmt: skip
    p.add_argument("--fused-norm", action="store_true", help="Liger-Kernel's fused RMSNorm (one kernel each way)")
    p.add_argument("--dtype", default="bf16", choices=DTYPE_NAMES)
    p.add_argument("--batch", type=positive, default=1)
    p.add_argument("--cp-size", type=positive, default=1, help="context parallelism over N GPUs: the estimate is per rank")
    p.add_argument("--sp-size", type=positive, default=1, help="Ulysses sequence parallelism over N GPUs (DeepSpeed's; the "
                   "state sharded as ZeRO-3 does, by FSDP2): the estimate is per rank")  # fmt: skip
    p.add_argument("--replicas", type=count, default=1, help="data-parallel copies of this step (HSDP's dp_replicate_"
                   "size, or DDP): the time adds their gradient all-reduce; the memory per rank is the same")  # fmt: skip
    p.add_argument("--cp-comm", default="allgather", choices=est.CP_COMMS, help="how CP ranks exchange keys and values "
                   "(accelerate's cp_comm_strategy): allgather (its default) or alltoall (a ring of sends)")  # fmt: skip
    p.add_argument("--device", default="cuda", choices=est.DEVICES, help="whose kernels the step runs: cuda (emulated on "
                   "fake tensors) or cpu")  # fmt: skip
    p.add_argument("--optim", default="fused", choices=est.OPTIMIZERS, help="AdamW implementation: fused (the Trainer's "
                   "default), foreach, for-loop")  # fmt: skip
    p.add_argument("--gpu", default=None, help=f"say whether the peak fits {CARDS}, and what is not counted")
    p.add_argument("--exact", action="store_true", help="trace every layer (default: 3 and 4 layers, extended; the same bytes)")
    p.add_argument("--no-autocast", dest="autocast", action="store_const", const=False, default=None, help="a bf16 model "
                   "trained with bf16=False (default: the forward under bf16 autocast where a Trainer with bf16=True runs "
                   "it so: one GPU, no FSDP2 or DeepSpeed)")  # fmt: skip
    p = command("plan", _cmd_plan, "add the levers one by one until a sequence fits the GPUs", model, mixed, attn, as_json, limit)
    p.add_argument("--gpus", type=positive, default=1, help="GPUs available for context parallelism (power of two)")
    p.add_argument("--host-state", action="store_true", help="ALST's one-GPU levers as steps: the optimizer, then the "
                   "weights on the host (DeepSpeed ZeRO offload), Liger's fused norm")  # fmt: skip
    p.add_argument("--gpu", "--gpu-memory", dest="gpu", default="H100-80GB", help=f"each GPU: {CARDS} (default H100-80GB)")
    p.add_argument("--exact", action="store_true", help="trace every layer of every step")
    p = command("list", _cmd_list, "the notebooks, their sizes and what each size needs")
    p.add_argument("--markdown", action="store_true", help="the table the README carries")
    command("presets", _cmd_presets, "the model presets")
    command("site", _cmd_site, "a static HTML site of the lessons as `longctx run`/`make` ran them", size, out, quiet)
    p = command("lab", _cmd_lab, "JupyterLab on the lessons: no news pop-up, this environment's kernel")
    p.add_argument("folder", nargs="?", default=None, help="folder to open (default: the notebooks)")
    p.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="after --: options for JupyterLab itself")
    p = command("data", _cmd_data, "fetch the corpus (hash checked), build the tokenizer and caches, verify them", force)
    p.add_argument("--verify", action="store_true", help="only check what is on disk against data/manifest.json")
    return parser


class Stopped(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or a stop from outside (SIGTERM: `kill`, `scancel`, a service manager), with its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame) -> None:
    # the kernels first: nbclient's graceful shutdown of one still starting once hung a sweep past 60 s; with them
    # slurm-local's controllers and the points under them (which ignore Ctrl-C: sweep.py), all killed at once
    kernels = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # one gone or a zombie meanwhile: the others are still stopped
            kernels += [proc.pid] if re.search(r"ipykernel_launcher|submitit\.local\._local", " ".join(proc.cmdline())) else []
    children.kill_trees(kernels)
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if hasattr(signal, "SIGPIPE"):  # `longctx list | head -1` ends quietly, as command-line tools do
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        if argv is None:  # run as the program, not called from Python
            signal.signal(signal.SIGINT, _interrupt)
            signal.signal(signal.SIGTERM, _interrupt)  # stopped from outside: the same clean end, no orphaned kernel
        if HUB_ID.match(model := getattr(args, "model", None) or "") and os.path.exists(model):  # as transformers reads it
            print(
                f"note: {model} is the folder {os.path.abspath(model)} here, not the hub's model of that name.", file=sys.stderr
            )
        args.func(args)
    except KeyboardInterrupt as exc:
        logging.getLogger("asyncio").disabled = True  # a dead kernel's pending tasks would report it at exit
        kept = "Finished work is kept (a sweep's finished points, a run's earlier outputs); run the same command again to go on"
        how = "stopped (SIGTERM)" if getattr(exc, "signum", None) == signal.SIGTERM else "interrupted"
        print(f"longctx: {how}. {kept}.", file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM
    except LongctxError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"longctx: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # one line naming the path and the cause: a full disk, a folder it may not write, ...
        if args.debug:
            traceback.print_exc()
        with contextlib.suppress(OSError, ValueError):  # what stdout still holds goes nowhere: no second failed flush
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"longctx: error: {where}{exc.strerror or exc}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
