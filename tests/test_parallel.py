import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import refused

from longctx import LongctxError, models
from longctx.paths import REPO
from longctx.run import parallel
from longctx.run.cp_worker import sft_kwargs


def _cfg(**changes):
    cfg = models.config("tiny")
    for k, v in changes.items():
        setattr(cfg, k, v)
    return cfg


SLIDING = [dict(use_sliding_window=True, sliding_window=128), dict(layer_types=["full_attention", "sliding_attention"])]


@pytest.mark.parametrize(
    "changes,kwargs,named",  # named: what the refusal names (None: a plan that runs)
    [
        ({}, dict(seq_len=1001, cp_size=4), "pad_to_multiple_of=8"),
        ({}, dict(seq_len=1024, sp_size=8), "sp_size"),
        ({}, dict(seq_len=1024, sp_size=3), "sp_size"),
        ({}, dict(seq_len=1024, cp_size=2, sp_size=2), "sp_size"),
        ({}, dict(seq_len=1024, cp_size=0), "cp_size"),
        *((changes, dict(seq_len=1024, cp_size=2), "sliding_attention") for changes in SLIDING),
        *((changes, dict(seq_len=1024, sp_size=2), None) for changes in SLIDING),  # Ulysses splits heads: windows are fine
        ({}, dict(seq_len=1000, cp_size=4), None),  # a multiple of 2 × 4
        ({}, dict(seq_len=1001, sp_size=2), None),  # Ulysses has no length rule of its own here
        ({}, dict(seq_len=1024, sp_size=4), None),  # more ranks than KV heads: DeepSpeed replicates them
    ],
)
def test_a_parallel_plan_runs_or_is_refused_naming_the_fix(changes, kwargs, named):
    if named is None:
        return parallel.check_plan(_cfg(**changes), **kwargs)
    with pytest.raises(LongctxError) as err:
        parallel.check_plan(_cfg(**changes), **kwargs)
    assert named in str(err.value)


def test_padded_length():
    assert parallel.padded_length(1001, 4) == 1008 and parallel.padded_length(1008, 4) == 1008


def test_launch_refuses_before_starting_processes(tmp_path):
    with refused("mode"):
        parallel.launch("tp", 2, model="tiny", seq_len=64, out=tmp_path)
    with refused("seq_len"):
        parallel.launch("cp", 4, model="tiny", seq_len=66, out=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing was launched


@pytest.mark.skipif(parallel.deepspeed_available(), reason="DeepSpeed is installed here")
def test_ulysses_without_deepspeed_names_the_install(tmp_path):
    with refused("DS_BUILD_OPS=0"):
        parallel.launch("sp", 2, model="tiny", seq_len=64, out=tmp_path)


def _workers_of(out) -> list[int]:
    """PIDs of processes whose command line names this run's spec."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(out) in (proc / "cmdline").read_bytes().decode(errors="ignore"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_workers_do_not_outlive_a_killed_kernel(tmp_path):
    out = tmp_path / "run"
    code = (
        "from longctx.run import parallel\n"
        f"parallel.launch('cp', 2, model='small', seq_len=65536, out={str(out)!r}, progress=False)\n"
    )
    kernel = subprocess.Popen([sys.executable, "-c", code])  # stands in for the notebook's kernel
    deadline = time.time() + 120
    while len(_workers_of(out)) < 3 and time.time() < deadline:  # torchrun and its two ranks are up
        time.sleep(0.2)
    assert len(_workers_of(out)) >= 3
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    deadline = time.time() + 60
    while _workers_of(out) and time.time() < deadline:
        time.sleep(0.5)
    survivors = _workers_of(out)
    for pid in survivors:  # a failing run must not leave them behind either
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


@pytest.mark.slow
def test_a_timed_out_launch_leaves_no_rank_behind(tmp_path):
    out = tmp_path / "run"
    with refused(str(out / "launch.log")):  # stopped at its limit, its log named
        parallel.launch("cp", 2, model="small", seq_len=65536, out=out, timeout=3, progress=False)
    time.sleep(1)
    assert _workers_of(out) == []  # torchrun's ranks sit in process groups of their own: found through /proc


@pytest.mark.slow
@pytest.mark.skipif(not parallel.deepspeed_available(), reason="DeepSpeed is not installed (pip install 'longctx[deepspeed]')")
def test_a_stale_deepspeed_build_lock_does_not_stop_a_ulysses_run(tmp_path, monkeypatch):
    """A DeepSpeed op build killed midway leaves torch's lock file in the extensions folder; torch waits on it without
    a limit. The Ulysses run builds nothing on a CPU (compat.deepspeed_without_shm_build), so it finishes."""
    extensions = tmp_path / "torch_extensions"
    (extensions / "deepspeed_shm_comm").mkdir(parents=True)
    (extensions / "deepspeed_shm_comm" / "lock").touch()  # what a killed build leaves
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    run = parallel.launch("sp", 2, model="tiny", seq_len=64, out=tmp_path / "run", timeout=300, progress=False)
    assert run.nprocs == 2 and run.loss > 0
    assert sorted(p.name for p in (extensions / "deepspeed_shm_comm").iterdir()) == ["lock"]  # nothing was built


@pytest.mark.slow
def test_pool_workers_end_with_the_process_that_started_them(tmp_path):
    code = (
        "import os, time\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "from multiprocessing import get_context\n"
        "from longctx import children\n"
        "if __name__ == '__main__':\n"
        "    pool = ProcessPoolExecutor(2, mp_context=get_context('spawn'), initializer=children.stop_with_parent)\n"
        "    futures = [pool.submit(time.sleep, 120) for _ in range(2)]\n"
        "    time.sleep(3)\n"
        "    print(*[p.pid for p in pool._processes.values()], flush=True)\n"
        "    time.sleep(120)\n"
    )
    script = tmp_path / "sweep_like.py"
    script.write_text(code)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in parent.stdout.readline().split()]
    assert len(workers) == 2
    parent.send_signal(signal.SIGKILL)  # as when a sweep is killed
    parent.wait()
    deadline = time.time() + 20
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.3)
        alive = [p for p in workers if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def test_the_full_length_cp_config_says_what_the_accelerate_file_says():
    """A rank's config and scripts/context_parallel_8gpu.yaml: two ways to launch the same run."""

    file = yaml.safe_load((REPO / "scripts" / "context_parallel_8gpu.yaml").read_text())
    n = file["num_processes"]
    spec = dict(mode="cp", device="cuda", model="qwen3-4b", seq_len=1048576, seed=0, checkpointing=True, out="o")
    kw = sft_kwargs(spec, n)
    assert kw["fsdp"] is True and file["distributed_type"] == "FSDP"
    assert kw["fsdp_config"]["fsdp_version"] == file["fsdp_config"]["fsdp_version"] == 2
    assert kw["parallelism_config"].cp_size == file["parallelism_config"]["parallelism_config_cp_size"] == n
    assert kw["bf16"] is True and file["mixed_precision"] == "bf16"
