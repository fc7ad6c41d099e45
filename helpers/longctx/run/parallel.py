"""Split the sequence across processes: context parallelism (CP: accelerate `ParallelismConfig(cp_size=N)`, FSDP2,
torch's ring attention; causal only, each rank holding two chunks, for load balance) and DeepSpeed Ulysses (SP: an
all-to-all swaps the token split for a head split around attention)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from longctx import children, models
from longctx import device as current_device
from longctx.errors import LongctxError, check_choice
from longctx.shapes import attention_kinds, check_plan, padded_length  # noqa: F401  (the lesson reads them here)

MODES = ("single", "cp", "sp")
_RAISED = re.compile(r"\[rank\d+\]: ((?:\w+\.)*\w*(?:Error|Exception)\b.*)")


class RunFailed(LongctxError):
    """A launch whose ranks failed; `raised` is the first exception a rank reported (None when none did)."""

    def __init__(self, message: str, raised: str | None = None):
        super().__init__(message)
        self.raised = raised


def deepspeed_available() -> bool:
    try:
        import deepspeed  # noqa: F401
    except Exception:  # ImportError, or a broken build
        return False
    return True


@dataclass
class ParallelRun:
    mode: str
    nprocs: int
    ranks: list[dict]  # one record per rank (cp_worker's rank<r>.json)
    out: Path
    seconds: float  # wall time of the whole launch

    def __post_init__(self) -> None:  # the slowest and the largest rank's
        self.loss: float = self.ranks[0]["loss"]
        self.step_seconds: float = max(r["step_seconds"] for r in self.ranks)
        self.activations_peak_bytes: int = max(r["activations_peak_bytes"] for r in self.ranks)

    def grads(self):
        import torch

        return torch.load(self.out / "grads.pt", map_location="cpu")  # never onto the notebook's GPU


def launch(
    mode, nprocs, *, model, seq_len, out, args=None, seed=0, checkpointing=False, timeout=1800, progress=True, dtype="fp32",
    documents=None,
):  # fmt: skip
    """A ParallelRun: one SFTTrainer step of `model` (weights in `dtype`) on one `seq_len`-token sequence over `nprocs`
    processes of this machine's device, all stopped after `timeout` seconds."""
    models.torch_dtype(dtype)  # refuse an unknown dtype before a process starts
    check_choice("mode", mode, MODES)
    if mode == "single" and nprocs != 1:
        raise LongctxError("mode='single' runs one process (nprocs=1).")
    if args is not None and not callable(args):
        raise LongctxError("args: a function of the world size that returns each rank's SFTConfig, e.g. rank_args.")
    check_plan(models.config(model), seq_len, cp_size=nprocs if mode == "cp" else 1, sp_size=nprocs if mode == "sp" else 1)
    if mode == "sp" and not deepspeed_available():
        raise LongctxError(
            "Ulysses sequence parallelism needs DeepSpeed: DS_BUILD_OPS=0 pip install "
            "--no-build-isolation 'longctx[deepspeed]' (CPU builds need no compiled ops)."
        )
    device = current_device()
    if device == "cuda":
        import torch

        if nprocs > torch.cuda.device_count():  # NCCL needs one GPU per rank
            raise LongctxError(f"{mode} over {nprocs} processes needs {nprocs} GPUs; here: {torch.cuda.device_count()}.")
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spec = dict(mode=mode, device=device, model=model, seq_len=seq_len, seed=seed, checkpointing=checkpointing, dtype=dtype)
    if documents is not None:
        spec["documents"] = [[int(t) for t in ids] for ids in documents]
    if args is not None:
        import dill

        (out / "args.dill").write_bytes(dill.dumps(args, recurse=True))
        spec["args"] = str(out / "args.dill")
    (out / "spec.json").write_text(json.dumps(spec | {"out": str(out)}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nprocs}"]
    cmd += ["-m", "longctx.run.cp_worker", str(out / "spec.json")]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), PYTHONUNBUFFERED="1")
    label, log, start = f"{mode} × {nprocs}", out / "launch.log", time.perf_counter()
    with log.open("w") as fh, tqdm(total=nprocs, desc=f"{label}: ranks done", disable=not progress, leave=False) as bar:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=children.stop_with_parent
        )
        try:
            while proc.poll() is None:
                if time.perf_counter() - start > timeout:
                    raise LongctxError(f"{label} run exceeded {timeout:.0f} s and was stopped; log: {log}")
                bar.n = len(list(out.glob("rank*.json")))
                bar.refresh()
                time.sleep(0.2)
        except BaseException:  # an interrupted kernel, a timeout: torchrun and every rank go with it
            children.stop_tree(proc)
            raise
    files = [out / f"rank{r}.json" for r in range(nprocs)]
    if proc.returncode != 0 or not all(f.exists() for f in files):
        lines = log.read_text().splitlines()
        # what a rank raised, as torch's elastic launcher prefixes it ("[rank0]: ValueError: ..."), before its report
        raised = next((m.group(1) for m in map(_RAISED.match, lines) if m), None)
        raise RunFailed(
            f"{mode} run over {nprocs} processes failed (exit code {proc.returncode})"
            + (f": {raised}" if raised else "")
            + f"\nlog {log}, its last lines:\n"
            + "\n".join(lines[-25:]),
            raised=raised,
        )
    return ParallelRun(mode, nprocs, [json.loads(f.read_text()) for f in files], out, time.perf_counter() - start)


def check_args(built, mode: str, nprocs: int) -> None:
    """The config a lesson's `args` built (in each rank: a DeepSpeed config needs the rank's own process group) splits
    the sequence as `mode` says, over `nprocs` ranks."""
    pc = getattr(built, "parallelism_config", None)
    sizes = {"cp": getattr(pc, "cp_size", 1), "sp": getattr(pc, "sp_size", 1)}
    wanted = {"single": {"cp": 1, "sp": 1}, "cp": {"cp": nprocs, "sp": 1}, "sp": {"cp": 1, "sp": nprocs}}[mode]
    if sizes != wanted:
        raise LongctxError(
            f"A {mode} run over {nprocs} process(es) needs a config with cp_size={wanted['cp']} and sp_size={wanted['sp']}; "
            f"the `args` function built cp_size={sizes['cp']}, sp_size={sizes['sp']} for a world of {nprocs}."
        )


def compare(reference: ParallelRun, other: ParallelRun) -> dict:
    """Loss and gradient differences of `other` against `reference` (one process)."""
    a, b = reference.grads(), other.grads()
    if set(a) != set(b):
        raise LongctxError(f"the two runs have different parameters: {sorted(set(a) ^ set(b))[:5]}")
    ratio = sum(float((a[k].double() * b[k].double()).sum()) for k in a) / sum(float((a[k].double() ** 2).sum()) for k in a)
    return {
        "loss_abs_diff": abs(reference.loss - other.loss),
        "grad_max_abs_diff": max(float((a[k] - b[k]).abs().max()) for k in a),
        "grad_scale": ratio,  # least-squares scale of b against a: 1.0 when the gradients agree
        "grad_max_abs_diff_after_scale": max(float((a[k] - b[k] / ratio).abs().max()) for k in a),
        "activations_ratio": other.activations_peak_bytes / reference.activations_peak_bytes,
        "step_seconds": other.step_seconds,
    }
