"""Sweeps, on the synthetic lesson (tests/lessons): resumable after a kill, a point's outcomes (out of memory and a
time-out are results, other failures are retried), the key that says when a finished point may be reused, one sweep at
a time on a folder, Ctrl-C, the submitit paths and SLURM's account of a task (stand-ins of its commands; `make
slurm-check` runs a real one-node cluster)."""

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import SYNTHETIC, refused
from tqdm import tqdm

from longctx import LongctxError, files
from longctx.run import harness
from longctx.tools import slurm, sweep

pytestmark = pytest.mark.usefixtures("synthetic")
ENV = {**os.environ, "LONGCTX_NOTEBOOKS": str(SYNTHETIC)}


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "longctx.tools.cli", "sweep", "00", "--size", "ci", "--out", str(out), "-q", "--metric",
            "total", "--grid", "STEPS=2,3", "--grid", "SEED=0,5", "-p", "SLEEP=1", *extra]  # fmt: skip


def _done(out: Path) -> list[Path]:
    return sorted((out / "points").glob("*/point.json"))


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory):
    """A sweep of two points killed after the first, then run again."""
    out = tmp_path_factory.mktemp("sweep")
    cli = [a if a != "SEED=0,5" else "SEED=5" for a in _cli(out)]
    proc = subprocess.Popen(cli, env=ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while len(_done(out)) < 1 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-way: the second point is running
    killed = proc.communicate()[0].decode(errors="replace")  # what it said: shown should the resume go wrong
    first = {p.parent.name: p.stat().st_mtime_ns for p in _done(out)}
    resumed = subprocess.run(cli, env=ENV, capture_output=True, text=True, timeout=300)
    return out, first, resumed, killed


def test_a_killed_sweep_resumes_only_the_missing_points_and_tabulates_them(killed_then_resumed):
    out, first, resumed, killed = killed_then_resumed
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(first) == 1 and "1 of 2 points already done; running 1" in resumed.stdout, (first, killed, resumed.stdout)
    after = {p.parent.name: p.stat().st_mtime_ns for p in _done(out)}
    assert len(after) == 2 and all(after[name] == stamp for name, stamp in first.items())  # finished: not recomputed
    assert not list((out / "points").glob(".*.tmp-*"))  # the killed point's half result is gone
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    totals = {(r["STEPS"], r["SEED"]): float(r["total"]) for r in rows}
    assert totals == {("2", "5"): 11, ("3", "5"): 18} and {r["status"] for r in rows} == {"ok"}
    assert (out / "sweep_total.png").exists()


@pytest.mark.slow
def test_the_slurm_path_through_submitits_local_executor_gives_the_same_numbers(killed_then_resumed, tmp_path):
    sw = sweep.Sweep("00", "ci", {"STEPS": [3], "SEED": [5]}, out=tmp_path)
    rows = list(csv.DictReader(sweep.run(sw, executor="slurm-local", slurm={"time": 5}, progress=False).open()))
    assert [(r["status"], float(r["total"])) for r in rows] == [("ok", 18)]
    assert list((tmp_path / "submitit").iterdir())  # submitit's own job folders: it really submitted


@pytest.mark.parametrize(
    "ename,evalue",
    [
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 20 GiB"),
        (harness.OOM_KILLED, "Kernel died"),
        ("RuntimeError", "DefaultCPUAllocator: can't allocate memory: you tried to allocate 256000000000 bytes."),
        ("ValueError", "the lesson was asked to fail"),  # any other failure: an error, run again next time
    ],
)
def test_out_of_memory_is_a_result_never_run_again_and_other_failures_are_retried(tmp_path, ename, evalue):
    def failing(*args, **kwargs):  # the harness's failure as a kernel's (test_harness: the real kernels' enames)
        raise harness.NotebookFailed("failed", ename, evalue)

    record = sweep.run_point("00_synthetic", "ci", {}, str(tmp_path / "p"), runner=failing)
    oom = ename != "ValueError"
    assert record["status"] == ("oom" if oom else "error") and sweep.is_done(tmp_path / "p") is oom


def test_a_timed_out_point_is_run_again_only_under_a_longer_limit(tmp_path):
    def stuck(*args, **kwargs):
        raise harness.NotebookFailed("timed out", harness.TIMED_OUT, "after 6 min")

    folder = tmp_path / "p"
    assert sweep.run_point("00_synthetic", "ci", {}, str(folder), runner=stuck, timeout=6)["status"] == "timed out"
    assert sweep.is_done(folder, limit=6) and not sweep.is_done(folder, limit=12)


def test_a_point_is_reused_only_under_the_same_notebook_settings_libraries_and_data(tmp_path, monkeypatch):
    def key(notebook="00", fixed=None):
        return sweep.Sweep(notebook, "ci", {"STEPS": [2]}, fixed=fixed or {}, out=tmp_path / "sw").key({"STEPS": 2})

    sw = sweep.Sweep("00", "ci", {"STEPS": [2, 3]}, out=tmp_path / "sw")
    keys = {sw.key(p) for p in sw.points()}
    assert len(keys) == 2 and key() in keys and key(fixed={"SEED": 1}) not in keys
    with monkeypatch.context() as m:
        m.setattr(sweep, "_version", lambda name: "9.9" if name == "torch" else "1")  # another library version
        assert key() not in keys
    copy = tmp_path / "00_synthetic.ipynb"  # an edited notebook is another experiment
    copy.write_text(harness.resolve("00").read_text().replace("numbers added up", "numbers, added"))
    assert key(str(copy)) not in keys


def test_another_sweeps_folder_or_a_sweeps_point_is_refused_untouched(tmp_path):
    sw = sweep.Sweep("00", "ci", {"STEPS": [2]}, out=tmp_path / "sw")
    files.claim(sw.out, "sweep")
    other = sw.out / "source" / "0123456789ab" / "01_other.ipynb"  # as another notebook's sweep left its snapshot
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    (sw.out / "sweep.csv").write_text("theirs\n")
    with refused("01_other"):
        sweep.Sweep("00", "ci", {"STEPS": [2]}, out=sw.out)
    other.unlink()  # the same notebook's sweep at another size: its points' records say which
    (sw.out / "points" / "STEPS-2__x").mkdir(parents=True)
    (sw.out / "points" / "STEPS-2__x" / "point.json").write_text(json.dumps({"status": "ok", "size": "cpu"}))
    with refused("size cpu"):
        sweep.Sweep("00", "ci", {"STEPS": [2]}, out=sw.out)
    assert (sw.out / "sweep.csv").read_text() == "theirs\n" and len(list((sw.out / "points").iterdir())) == 1
    tmp = files.claim(tmp_path / ".point.tmp", "run")  # a finished point is the sweep's: no run's folder
    sweep._place(tmp, tmp_path / "point", {"status": "ok"})
    with refused(str(tmp_path / "point")):  # `longctx run --out` into it would replace the point's outputs
        files.claim(tmp_path / "point", "run", {"results.json": False})


def test_a_metric_typo_is_refused_after_the_first_finished_point_which_is_kept(tmp_path):
    sw = sweep.Sweep("00", "ci", {"STEPS": [2, 3]}, out=tmp_path)
    files.claim(sw.out, "sweep")
    first = sw.points()[0]
    sw.folder(first).mkdir(parents=True)
    (sw.folder(first) / "point.json").write_text(
        json.dumps({"status": "ok", "key": sw.key(first), "results": {"measured": {"peak_gib": 1}}})
    )
    with refused("measured.peak_gb"):
        sweep.run(sw, metric="measured.peak_gb", progress=False)
    assert not sw.folder(sw.points()[1]).exists()  # the second point never ran


@pytest.mark.slow
@pytest.mark.parametrize(  # Ctrl-C once a kernel runs, or while the pool's workers are still starting (Python's start-up)
    "flags,when", [(["--jobs", "2"], "ipykernel"), (["--jobs", "2"], "spawn_main"), (["--executor", "slurm-local"], "ipykernel")]
)
def test_ctrl_c_stops_a_sweep_at_once_and_leaves_no_kernel(tmp_path, flags, when):
    out = tmp_path / "sw"
    cli = [a if a != "SLEEP=1" else "SLEEP=120" for a in _cli(out, *flags)]
    proc = subprocess.Popen(cli, env=ENV, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline, below = time.time() + 120, []
    # its own processes only (a kernel sits in a session of its own; another test's kernels are not this sweep's)
    while time.time() < deadline and sum(when in _cmdline(p) for p in below) < (2 if when == "spawn_main" else 1):
        time.sleep(0.05)
        below = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):  # (one while the pool spawns its workers is not seen: again)
        proc.wait(timeout=5)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=30) == 130 and b"Traceback" not in proc.stdout.read()
    time.sleep(1)
    assert below and not [p for p in below if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not _done(out)


def _cmdline(process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


def _fake(tmp_path, monkeypatch, **outputs: str) -> None:
    """SLURM's client commands as scripts printing `outputs` (name → text), first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in outputs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\ncat <<'END'\n{text}\nEND\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_slurm_task_states_come_from_squeue_while_queued_and_sacct_once_ended(tmp_path, monkeypatch):
    _fake(
        tmp_path,
        monkeypatch,
        sacct="41_0|COMPLETED|0:0\n41_1|CANCELLED by 0|0:15\n41_2|TIMEOUT|0:0\n41_[4-5,7%2]|CANCELLED by 0|0:0",
        squeue="41_3|PENDING|ReqNodeNotAvail, UnavailableNodes:n1\n41_2|COMPLETING|None",
    )
    assert slurm.states("41") == {
        0: ("COMPLETED", "exit code 0:0"),
        1: ("CANCELLED", "exit code 0:15"),
        2: ("COMPLETING", "None"),  # squeue's view is the newer one
        3: ("PENDING", "ReqNodeNotAvail, UnavailableNodes:n1"),
        **dict.fromkeys([4, 5, 7], ("CANCELLED", "exit code 0:0")),  # cancelled before they started: one row
    }
    assert slurm.ended_record("TIMEOUT", "exit code 0:0", "41", 2, tmp_path)["status"] == "timed out"
    _fake(tmp_path, monkeypatch, sacct="42|TIMEOUT|0:0\n41_0|COMPLETED|0:0", squeue="")
    assert slurm.states("42") == {0: ("TIMEOUT", "exit code 0:0")}  # a single point: a plain job, no array


def test_the_wait_ends_when_slurm_stops_answering_and_reports_tasks_it_ended(tmp_path, monkeypatch):
    monkeypatch.setattr(slurm, "POLL", 0.01)
    monkeypatch.setattr(slurm, "SILENT_LIMIT", 0.05)
    folders = [tmp_path / "a", tmp_path / "b"]
    _fake(tmp_path, monkeypatch, squeue="")
    (tmp_path / "bin" / "squeue").write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    with refused("7"):  # the array, left as it is
        slurm.wait("7", folders, lambda f: None, tqdm(total=2, disable=True))
    _fake(tmp_path, monkeypatch, sacct="7_0|COMPLETED|0:0\n7_[1]|CANCELLED by 0|0:0", squeue="")
    ended = slurm.wait("7", folders, lambda f: "ok" if f.name == "a" else None, tqdm(total=2, disable=True))
    assert ended == {1: ("CANCELLED", "exit code 0:0")}  # one done with its record, one SLURM cancelled


def test_a_live_array_of_this_sweep_holds_every_executor_off_its_folder(tmp_path, monkeypatch):
    sw = sweep.Sweep("00", "ci", {"STEPS": [2]}, out=tmp_path / "sw")
    files.claim(sw.out, "sweep")
    (sw.out / slurm.RECORD).write_text('{"array": "65", "tasks": 2}')
    _fake(tmp_path, monkeypatch, sacct="", squeue="65_1|RUNNING|None")
    for executor in ("local", "slurm-local"):  # its live task would write the same points
        with refused("65"):
            sweep.run(sw, executor=executor, progress=False)
    _fake(tmp_path, monkeypatch, sacct="65_0|COMPLETED|0:0\n65_1|COMPLETED|0:0", squeue="")
    slurm.still_running(sw.out)  # nothing live: a re-run may go on
    assert not (sw.out / "points").exists()


def test_a_point_its_node_refuses_before_a_kernel_is_recorded_with_why(tmp_path, monkeypatch):
    def node_refuses(*args, **kwargs):
        raise LongctxError("00_synthetic at size gpu needs 1 CUDA GPU")

    monkeypatch.setattr(sweep, "run_point", node_refuses)
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "9")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    record = sweep.slurm_task("00_synthetic", "gpu", {}, str(tmp_path / "p"), None, "k", 5)
    assert record["status"] == "refused" and "CUDA GPU" in record["error"] and record["slurm_job"] == "9_0"
    assert json.loads((tmp_path / "p" / "point.json").read_text())["status"] == "refused"


def test_the_table_plots_a_metric_against_list_values_one_tick_each(tmp_path):
    sw = sweep.Sweep("00", "ci", {"SCALES": [[1], [1, 2]]}, out=tmp_path)
    files.claim(sw.out, "sweep")
    for i, point in enumerate(sw.points()):
        sw.folder(point).mkdir(parents=True)
        status = {"status": "ok", "results": {"total": i}} if i else {"status": "oom", "error": "OutOfMemoryError"}
        (sw.folder(point) / "point.json").write_text(json.dumps({"key": sw.key(point), **status}))
    path = sweep.write_table(sw, "total")
    assert [r["status"] for r in csv.DictReader(path.open())] == ["oom", "ok"] and (tmp_path / "sweep_total.png").exists()
