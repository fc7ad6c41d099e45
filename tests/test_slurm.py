"""Sweeps on a real SLURM: a one-node cluster (Debian's slurm-wlm, munge, slurmdbd on MariaDB) started by
tests/slurm/start.sh on this machine, driven through `longctx sweep --executor slurm` as a cluster user would: the job
array in sacct, the same table as the local executor's, scancel of a task and of the array, a re-run that resubmits
only the missing points, a failing notebook, a point past --time, a drained node, Ctrl-C, and requests the cluster
cannot honour refused before submission. Skipped, with the reason, where the cluster cannot be started (not root, no
apt-get). `make slurm-check` runs this module alone."""

import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SYNTHETIC

pytestmark = [pytest.mark.slow, pytest.mark.slurm]
HERE = Path(__file__).parent / "slurm"
STATE = Path(os.environ.get("LONGCTX_SLURM_STATE", "/tmp/longctx-slurm"))
GRID = ["STEPS=2,3", "SEED=0,5"]
POINTS = math.prod(len(item.split("=")[1].split(",")) for item in GRID)
# the sweep machinery is under test, not a lesson: the synthetic lesson, a few seconds a point
FAST = {"SLEEP": 3}


@pytest.fixture(scope="module")
def cluster():
    """The one-node cluster, up for this module (started when it is not), its client settings in os.environ."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None and shutil.which("slurmctld") is None:
        pytest.skip("a one-node SLURM is started as root, from Debian's packages (apt-get): not available here")
    conf = {**os.environ, "SLURM_CONF": str(STATE / "etc" / "slurm.conf")}
    ping = shutil.which("scontrol") and subprocess.run(["scontrol", "ping"], env=conf, capture_output=True, text=True, timeout=30)
    was_up = bool(ping) and "UP" in ping.stdout  # someone's cluster already running: left running afterwards
    started = subprocess.run(["bash", str(HERE / "start.sh"), str(STATE)], capture_output=True, text=True, timeout=1200)
    assert started.returncode == 0, started.stderr[-4000:]
    env = dict(re.findall(r"^export (\w+)=(.*)$", (STATE / "env.sh").read_text(), re.M))
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "PATH", "OMP_NUM_THREADS", "LONGCTX_NOTEBOOKS")}
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]
    os.environ["LONGCTX_NOTEBOOKS"] = str(SYNTHETIC)  # (sbatch hands the tasks this environment)
    os.environ["PATH"] = os.environ["PATH"] + ":/usr/sbin"
    os.environ["OMP_NUM_THREADS"] = "1"  # two points at once on two cores, a thread each (sbatch passes it on)
    yield env
    for k, v in saved.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    if not was_up:
        subprocess.run(["bash", str(HERE / "stop.sh"), str(STATE)], capture_output=True, timeout=300)


def _sweep(out: Path, *extra: str, grid=GRID, notebook="00", fixed=FAST) -> list[str]:
    args = [sys.executable, "-m", "longctx.tools.cli", "sweep", notebook, "--size", "ci", "--out", str(out)]
    for g in grid:
        args += ["--grid", g]
    for k, v in fixed.items():
        args += ["-p", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def _run(args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def _rows(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "sweep.csv").open()))


def _array(out: Path, timeout=120) -> str:
    """The job array the sweep in `out` submitted (its record), once it has."""
    deadline = time.time() + timeout
    while not (out / "slurm.json").is_file() and time.time() < deadline:
        time.sleep(0.2)
    return json.loads((out / "slurm.json").read_text())["array"]


def _states(array: str) -> dict[str, str]:
    """sacct's state of each task of `array` (the accounting database has them once they ended)."""
    text = _run(["sacct", "-n", "-P", "-X", "-j", array, "-o", "JobID,State"], timeout=30).stdout
    return {job: state.split()[0] for job, state in (line.split("|") for line in text.splitlines())}


def _until(check, timeout: float, what: str):
    deadline = time.time() + timeout
    while not (found := check()) and time.time() < deadline:
        time.sleep(0.5)
    assert found, f"{what} within {timeout:.0f} s"
    return found


def _stamps(out: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "points").glob("*/point.json")}


def _done(out: Path) -> list[str]:
    return [name for name in _stamps(out) if json.loads((out / "points" / name / "point.json").read_text())["status"] == "ok"]


def test_a_sweep_on_slurm_is_one_job_array_and_the_local_sweeps_table(cluster, tmp_path):
    on_slurm = _run(_sweep(tmp_path / "slurm", "--executor", "slurm", "--time", "10", "-q"))
    assert on_slurm.returncode == 0, on_slurm.stdout + on_slurm.stderr
    array = json.loads((tmp_path / "slurm" / "slurm.json").read_text())["array"]
    assert f"SLURM job array {array}: {POINTS} task(s)" in on_slurm.stdout + on_slurm.stderr
    done = lambda: set(_states(array).values()) == {"COMPLETED"} and len(_states(array)) == POINTS  # noqa: E731
    assert _until(done, 60, "every task done")
    assert sorted(_states(array)) == [f"{array}_{i}" for i in range(POINTS)]  # one array, a task per point
    local = _run(_sweep(tmp_path / "local", "--jobs", "2", "-q"))
    assert local.returncode == 0, local.stdout + local.stderr
    slurm_rows, local_rows = _rows(tmp_path / "slurm"), _rows(tmp_path / "local")
    assert list(slurm_rows[0]) == list(local_rows[0])  # the same columns, in the same order

    def same(row, out):  # but for the wall time, and the folder each point ran in (named by its key and process)
        folder = re.compile(re.escape(str(out / "points")) + r"/[^/]+")
        return {k: folder.sub("<point>", v) for k, v in row.items() if k != "seconds"}

    for a, b in zip(slurm_rows, local_rows):
        assert same(a, tmp_path / "slurm") == same(b, tmp_path / "local")
    records = [json.loads(p.read_text()) for p in (tmp_path / "slurm" / "points").glob("*/point.json")]
    assert sorted(r["slurm_job"] for r in records) == sorted(_states(array))  # each point names its task
    # SLURM runs a finished task again (a requeue, as after a node failure): the point is not recomputed
    stamps = _stamps(tmp_path / "slurm")
    _run(["scontrol", "requeue", f"{array}_0"])
    _run(["scontrol", "update", f"jobid={array}_0", "begintime=now"])  # SLURM holds a requeued job back two minutes
    _until(lambda: _run(["squeue", "-h", "-j", f"{array}_0"]).stdout.strip(), 30, "the requeued task in the queue")
    _until(lambda: not _run(["squeue", "-h", "-j", f"{array}_0"]).stdout.strip(), 300, "the requeued task ended")
    assert _stamps(tmp_path / "slurm") == stamps


def test_cancelled_tasks_and_a_cancelled_array_are_resubmitted_alone(cluster, tmp_path):
    out, log = tmp_path / "sw", tmp_path / "first.log"
    with log.open("w") as sink:
        first = subprocess.Popen(_sweep(out, "--executor", "slurm", "-q"), stdout=sink, stderr=subprocess.STDOUT)
    array = _array(out)
    _until(lambda: len(_done(out)) >= 1, 300, "a first point done")
    _run(["scancel", array])  # the whole array, mid-run
    assert first.wait(timeout=120) == 2, log.read_text()
    text = log.read_text()
    assert "did not finish" in text and "the same command retries them" in text and "Traceback" not in text
    rows = _rows(out)
    assert {r["status"] for r in rows} <= {"ok", "cancelled"} and any(r["status"] == "cancelled" for r in rows)
    assert all("SLURM state CANCELLED" in r["reason"] for r in rows if r["status"] == "cancelled")
    kept = {name: stamp for name, stamp in _stamps(out).items() if name in _done(out)}

    log = tmp_path / "second.log"
    with log.open("w") as sink:
        second = subprocess.Popen(_sweep(out, "--executor", "slurm", "-q"), stdout=sink, stderr=subprocess.STDOUT)
    _until(lambda: (out / "slurm.json").is_file() and _array(out) != array, 120, "a second array")
    again = _array(out)
    tasks = json.loads((out / "slurm.json").read_text())["tasks"]
    assert tasks == POINTS - len(kept)  # only the missing points
    _run(["scancel", f"{again}_{tasks - 1}"])  # one task of it, before it ran
    assert second.wait(timeout=600) == 2, log.read_text()
    assert "1 point(s) did not finish" in log.read_text()
    assert all(_stamps(out)[name] == stamp for name, stamp in kept.items())  # finished points untouched

    third = _run(_sweep(out, "--executor", "slurm", "-q"))
    assert third.returncode == 0, third.stdout + third.stderr
    assert f"{POINTS - 1} of {POINTS} points already done; running 1" in third.stdout
    assert {r["status"] for r in _rows(out)} == {"ok"}
    assert all(_stamps(out)[name] == stamp for name, stamp in kept.items())
    assert not list((out / "points").glob(".*.tmp-*"))  # nothing stale


def test_a_point_that_fails_in_its_notebook_shows_the_notebooks_error(cluster, tmp_path):
    done = _run(_sweep(tmp_path / "sw", "--executor", "slurm", "-q", grid=["STEPS=2"], fixed={"END": "raise"}))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
    [row] = _rows(tmp_path / "sw")
    assert row["status"] == "error" and "ValueError" in row["reason"]


def test_a_point_past_its_time_is_timed_out(cluster, tmp_path):
    args = _sweep(tmp_path / "sw", "--executor", "slurm", "--time", "1", "-q", grid=["STEPS=2"], fixed={"SLEEP": 600})
    done = _run(args)
    assert done.returncode == 0 and "1-minute limit" in done.stderr, done.stdout + done.stderr
    [row] = _rows(tmp_path / "sw")
    assert row["status"] == "timed out", row
    again = _run(args)
    assert "1 of 1 points already done; running 0" in again.stdout  # a result under that limit, not re-run


def test_a_drained_node_is_shown_and_the_sweep_goes_on_once_it_is_back(cluster, tmp_path):
    node = _run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()[0]
    _run(["scontrol", "update", f"nodename={node}", "state=drain", "reason=longctx-test"])
    log = tmp_path / "sweep.log"
    try:
        args = _sweep(tmp_path / "sw", "--executor", "slurm", grid=["STEPS=2"])
        with log.open("w") as sink:  # the bar on stderr, as a user sees it
            proc = subprocess.Popen(args, stdout=sink, stderr=sink)
        _until(lambda: "waits:" in log.read_text(), 120, "the bar saying why the task waits")
    finally:
        _run(["scontrol", "update", f"nodename={node}", "state=resume"])
    assert proc.wait(timeout=300) == 0, log.read_text()
    assert re.search(r"task 0 waits: .*(ReqNodeNotAvail|Nodes required for job are DOWN)", log.read_text())


def test_ctrl_c_cancels_the_array_and_a_rerun_never_duplicates_live_tasks(cluster, tmp_path):
    out, log = tmp_path / "sw", tmp_path / "sweep.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(_sweep(out, "--executor", "slurm", "-q"), stdout=sink, stderr=subprocess.STDOUT)
    array = _array(out)
    proc.send_signal(signal.SIGKILL)  # the submitting process gone, its array still queued and running
    proc.wait()
    refused = _run(_sweep(out, "--executor", "slurm", "-q"))
    assert refused.returncode == 2 and f"SLURM job array {array} of this sweep still has" in refused.stderr, refused.stderr
    assert json.loads((out / "slurm.json").read_text())["array"] == array  # nothing submitted
    _run(["scancel", array])
    _until(lambda: not _run(["squeue", "-h", "-j", array]).stdout.strip(), 60, "the array gone from the queue")

    with log.open("w") as sink:
        proc = subprocess.Popen(_sweep(out, "--executor", "slurm", "-q"), stdout=sink, stderr=subprocess.STDOUT)
    again = _until(lambda: (out / "slurm.json").is_file() and _array(out) != array and _array(out), 120, "a new array")
    _until(lambda: list((out / "points").glob(".*.tmp-*")), 120, "a point running")
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    assert proc.wait(timeout=60) == 130, log.read_text()
    assert f"cancelled SLURM job array {again} (scancel {again})" in log.read_text()
    _until(lambda: not _run(["squeue", "-h", "-j", again]).stdout.strip(), 60, "Ctrl-C's array gone from the queue")
    time.sleep(5)  # the running points' own records of SLURM's SIGTERM
    records = [json.loads(p.read_text()) for p in (out / "points").glob("*/point.json")]
    assert {r["status"] for r in records} <= {"ok", "cancelled"}, records  # not "died"


@pytest.mark.parametrize("flags", [["--partition", "nope"], ["--gpus", "1"], ["--account", "nobody"]])
def test_requests_the_cluster_cannot_honour_are_refused_by_sbatch_before_anything_runs(cluster, tmp_path, flags):
    done = _run(_sweep(tmp_path / "sw", "--executor", "slurm", "-q", *flags))
    assert done.returncode == 2 and "sbatch" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "sw" / "slurm.json").exists() and not list((tmp_path / "sw").glob("points/*"))
