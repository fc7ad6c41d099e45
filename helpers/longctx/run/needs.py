"""What each notebook size needs (accelerator, GPUs, memory, hub, disk, minutes), from notebooks/params/needs.yaml,
and the check that refuses a size this machine lacks before a kernel starts (`longctx list` and the README show it)."""

import json
import shutil
import subprocess
import sys
from collections import namedtuple
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from longctx import device
from longctx.errors import LongctxError
from longctx.models import HUB_ID, check_fetchable
from longctx.paths import notebooks_dir

# a lesson's sizes: ci (the gpu size's code paths on a CPU, seconds: the tests), cpu (the lesson on a laptop), gpu
SIZES = ("ci", "cpu", "gpu")
MODEL_PARAMETERS = (
    "MODEL",
    "FULL_MODEL",
    "CHECK_MODEL",
    "SECOND_MODEL",
    "PROBE_MODEL",
    "HOST_MODEL",
    "TIME_MODEL",
)  # name a model
PATH_PARAMETERS = (*MODEL_PARAMETERS, "DATASET")  # ... or a local file the kernel reads
GB = 1e9  # cards are sold in decimal GB: an "80 GB" H100 reports about 85.5e9 bytes
# A run is stopped after LIMIT_FACTOR × its size's minutes + LIMIT_SLACK minutes (`longctx run --timeout` sets another):
# the minutes are measured with the machine otherwise idle, and `make test`'s two workers on two cores, or a kernel
# start on a loaded machine, take up to about twice that; a run past four times is stuck, not slow.
LIMIT_FACTOR, LIMIT_SLACK = 4, 2


@dataclass(frozen=True)
class Needs:
    minutes: float
    accelerator: str = "none"  # none, cuda or cuda-or-neuron
    gpus: int = 0
    gpu_memory_gb: float = 0.0
    hub: bool = False
    disk_gb: float = 0.0

    @property
    def limit_minutes(self) -> float:
        """How long a run of this size may take before it is stopped as stuck."""
        return LIMIT_FACTOR * self.minutes + LIMIT_SLACK

    def describe(self) -> str:
        """One line: '8 CUDA GPUs ≥ 80 GB, hub (20 GB disk), ~20 min (expected)'."""
        kind = "CUDA GPU" if self.accelerator == "cuda" else "CUDA GPU or Neuron core"
        gpus = f"{self.gpus} {kind}{'s' if self.gpus > 1 else ''} ≥ {self.gpu_memory_gb:g} GB"
        hub = [f"hub ({self.disk_gb:g} GB disk)"] if self.hub else []
        minutes = f"~{self.minutes:g} min" + (" (expected)" if self.accelerator != "none" else "")
        return ", ".join(["CPU" if self.accelerator == "none" else gpus, *hub, minutes])


def table() -> dict[str, dict[str, Needs]]:
    """notebook stem → size → Needs."""
    return _table(notebooks_dir() / "params" / "needs.yaml")


@lru_cache(maxsize=None)
def _table(path: Path) -> dict[str, dict[str, Needs]]:
    raw = yaml.safe_load(path.read_text()) or {}
    return {nb: {size: Needs(**fields) for size, fields in row.items()} for nb, row in raw.items()}


def of(notebook: str, size: str) -> Needs:
    if size not in table().get(notebook, {}):
        raise LongctxError(f"notebooks/params/needs.yaml declares nothing for {notebook} at size {size!r}: add its needs.")
    return table()[notebook][size]


Machine = namedtuple("Machine", "accelerator memory_bytes")  # "cuda", "neuron" or "none"; bytes per accelerator


def machine() -> Machine:
    """The accelerators this process can use. Counting CUDA devices starts no CUDA context; their memory is read in a
    child process, so the harness never holds GPU memory while a notebook runs."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count():
        probe = "import torch.cuda as c; print([c.get_device_properties(i).total_memory for i in range(c.device_count())])"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        if out.returncode:
            raise LongctxError(f"Could not read the GPUs' memory: {out.stderr.strip().splitlines()[-1:]}")
        return Machine("cuda", tuple(json.loads(out.stdout.splitlines()[-1])))
    if device() == "neuron":  # torch-neuronx registers the device; its memory is not queried here
        return Machine("neuron", (0,) * max(1, torch.accelerator.device_count()))
    return Machine("none", ())


def check(notebook: str, size: str, params: dict, have: Machine | None = None) -> Needs:
    """Refuse, naming what is missing, when this machine lacks what `notebook` at `size` needs: a hub id the run names
    that cannot be fetched (at any size: -p MODEL=... can name one at a CPU size too), the accelerator, its memory, the
    disk the size's downloads take."""
    from huggingface_hub import constants

    needs, run = of(notebook, size), f"{notebook} at size {size}"
    if needs.accelerator != "none":
        _check_accelerator(needs, run, have or machine())
    missing = check_hub(run, params)
    if needs.hub and missing:
        (cache := Path(constants.HF_HUB_CACHE)).mkdir(parents=True, exist_ok=True)
        if (free := shutil.disk_usage(cache).free) < needs.disk_gb * GB:
            raise LongctxError(
                f"{run} downloads about {needs.disk_gb:g} GB ({', '.join(missing)}) into {cache}, which has {free / GB:.1f} GB "
                "free. Free space there or set HF_HOME to a larger disk."
            )
    return needs


def check_hub(run: str, params: dict) -> list[str]:
    """The hub ids `params` names (models, a dataset) that are not in the hub cache, refused at once when the hub cannot
    give them (models.check_fetchable)."""
    ids = {v: "dataset" if k == "DATASET" else "model" for k, v in params.items() if k in PATH_PARAMETERS and isinstance(v, str)}
    return check_fetchable({i: kind for i, kind in ids.items() if HUB_ID.match(i) and not Path(i).exists()}, run)


def _check_accelerator(needs: Needs, run: str, have: Machine) -> None:
    count, wanted = len(have.memory_bytes), f"{run} needs {needs.describe().split(',')[0]}"
    if have.accelerator not in needs.accelerator.split("-or-") or count < needs.gpus:  # "cuda" or "cuda-or-neuron"
        found = f"{count} {have.accelerator.upper()} device(s)" if have.accelerator != "none" else "no GPU"
        raise LongctxError(
            f"{wanted}; this machine has {found}. Run it where they are (e.g. `longctx sweep ... --executor slurm --gpus N`), "
            "or use --size cpu (the lesson on a CPU) or --size ci (the GPU code paths on a CPU, shortened)."
        )
    cuda = have.memory_bytes[: needs.gpus] if have.accelerator == "cuda" else ()  # a Neuron core's memory is not read
    if small := [i for i, b in enumerate(cuda) if b < needs.gpu_memory_gb * GB]:
        raise LongctxError(
            f"{wanted}; this machine has {', '.join(f'cuda:{i} {have.memory_bytes[i] / GB:.0f} GB' for i in small)}. Use larger "
            "cards, or lower the size's lengths with -p (check them first with `longctx estimate`)."
        )


def markdown() -> str:
    """The README's table of sizes and needs."""
    lines = ["| notebook | " + " | ".join(f"`{s}`" for s in SIZES) + " |", "| --- |" + " --- |" * len(SIZES)]
    for notebook, row in table().items():
        lines.append(f"| `{notebook}` | " + " | ".join(row[s].describe() if s in row else "—" for s in SIZES) + " |")
    return "\n".join(lines)
