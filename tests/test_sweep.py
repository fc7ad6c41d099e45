"""Sweeps: the grid, resumability after a kill, out-of-memory points as results, the submitit path."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from longctx import LongctxError, files
from longctx.run import harness
from longctx.tools import sweep

GRID = ["SEQ_LEN=256,512", "TILE_TOKENS=64,128"]
# keep each point short: the sweep machinery is under test, not the lesson (its full-size estimates on the tiny
# preset, one short measured length, the estimator check at 128 tokens): ~17 s a point instead of ~40
FAST = {"FULL_MODEL": "tiny", "FULL_LENGTHS": [1024], "PLAIN_LENGTHS": [512], "CPU_LENGTHS": [128], "CHECK_LEN": 128}


def _cli(out: Path, *extra: str) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "longctx.tools.cli",
        "sweep",
        "01",
        "--size",
        "ci",
        "--out",
        str(out),
        "-q",
        "--metric",
        "measured.chunked.peak_gib",
    ]
    for g in GRID:
        args += ["--grid", g]
    for k, v in FAST.items():
        args += ["-p", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def _done(out: Path) -> list[Path]:
    return sorted(p for p in (out / "points").glob("*/point.json"))


@pytest.fixture(scope="module")
def killed_then_resumed(tmp_path_factory):
    """A 2×2 sweep of notebook 01 killed after two points, then re-run."""
    out = tmp_path_factory.mktemp("sweep")
    proc = subprocess.Popen(_cli(out), start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while len(_done(out)) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-way: the third point is running
    proc.wait()
    first = {p.parent.name: p.stat().st_mtime_ns for p in _done(out)}
    resumed = subprocess.run(_cli(out), capture_output=True, text=True, timeout=900)
    return out, first, resumed


def test_killed_sweep_resumes_only_the_missing_points(killed_then_resumed):
    out, first, resumed = killed_then_resumed
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(first) == 2
    assert f"{len(first)} of 4 points already done; running {4 - len(first)}" in resumed.stdout
    after = {p.parent.name: p.stat().st_mtime_ns for p in _done(out)}
    assert len(after) == 4
    assert all(after[name] == stamp for name, stamp in first.items())  # finished points were not recomputed
    assert not list((out / "points").glob(".*.tmp-*"))  # the killed point's half result is gone


def test_sweep_table_and_plot(killed_then_resumed):
    out = killed_then_resumed[0]
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    assert {(r["SEQ_LEN"], r["TILE_TOKENS"]) for r in rows} == {("256", "64"), ("256", "128"), ("512", "64"), ("512", "128")}
    peaks = {(r["SEQ_LEN"], r["TILE_TOKENS"]): float(r["measured.chunked.peak_gib"]) for r in rows}
    assert peaks[("512", "64")] > peaks[("256", "64")]
    assert (out / "sweep_measured.chunked.peak_gib.png").exists()


def test_slurm_path_through_submitits_local_executor(killed_then_resumed, tmp_path):
    local_rows = {(r["SEQ_LEN"], r["TILE_TOKENS"]): r for r in csv.DictReader((killed_then_resumed[0] / "sweep.csv").open())}
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [512], "TILE_TOKENS": [64]}, fixed=FAST, out=tmp_path)
    path = sweep.run(sw, executor="slurm-local", slurm={"time": 20}, progress=False)
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 1 and all(r["status"] == "ok" for r in rows)
    for r in rows:  # the same measured numbers as the local executor's points
        ref = local_rows[(r["SEQ_LEN"], r["TILE_TOKENS"])]
        for key in ("measured.plain.peak_gib", "measured.chunked.peak_gib", "measured.plain.loss_value"):
            assert float(r[key]) == pytest.approx(float(ref[key]), rel=1e-6)
    assert list((tmp_path / "submitit").iterdir())  # submitit's own job folders: it really submitted


@pytest.mark.parametrize(
    "ename,evalue",
    [
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 20 GiB"),
        ("OutOfMemoryKill", "Kernel died"),  # the OS's OOM killer (harness.OOM_KILLED)
        (
            "RuntimeError",
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate 256000000000 bytes.",
        ),  # torch's CPU allocator
    ],
)
def test_out_of_memory_point_is_a_result_and_not_rerun(tmp_path, ename, evalue):
    calls = []

    def oom_runner(notebook, size, params, out, progress, timeout):
        calls.append(params)
        raise harness.NotebookFailed("boom", ename, evalue)

    folder = tmp_path / "points" / "SEQ_LEN-1048576"
    record = sweep.run_point("01_chunked_loss", "ci", {"SEQ_LEN": 1048576}, str(folder), runner=oom_runner)
    assert record["status"] == "oom" and evalue in record["error"]
    assert sweep.is_done(folder)
    sweep.run_point("01_chunked_loss", "ci", {"SEQ_LEN": 1048576}, str(folder), runner=oom_runner)
    assert len(calls) == 1


def test_a_leftover_submitit_variable_outside_slurm_is_no_slurm_task_and_a_refusal_leaves_no_temporary(tmp_path, monkeypatch):
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")  # e.g. a shell inside a job: only what the sweep submits is a task
    monkeypatch.setenv("SLURM_JOB_ID", "777")
    import signal

    before = signal.getsignal(signal.SIGTERM)
    folder, point = tmp_path / "points" / "x", ("01_chunked_loss", "ci", {})
    done = harness.RunResult("01_chunked_loss", "ci", folder, None, {"results": {"peak": 1.0}}, 1.0)
    record = sweep.run_point(*point, str(folder), runner=lambda *a, **k: done)
    assert record["status"] == "ok" and "slurm_job" not in record
    assert signal.getsignal(signal.SIGTERM) is before  # the command's own Ctrl-C and SIGTERM handling stays

    def refused(*args, **kwargs):
        raise LongctxError("no")

    with pytest.raises(LongctxError):
        sweep.run_point(*point, str(tmp_path / "points" / "y"), runner=refused)
    assert sorted(p.name for p in (tmp_path / "points").iterdir() if "tmp" in p.name) == []


def test_a_timed_out_point_is_a_result_run_again_only_under_a_longer_limit(tmp_path):
    limits = []

    def stuck(notebook, size, params, out, progress, timeout):
        limits.append(timeout)
        raise harness.NotebookFailed("timed out", harness.TIMED_OUT, f"after {timeout:g} min")

    folder, point = tmp_path / "points" / "x", ("01_chunked_loss", "ci", {})
    record = sweep.run_point(*point, str(folder), runner=stuck, timeout=6)
    assert record["status"] == "timed out" and record["limit_minutes"] == 6 and "after 6 min" in record["error"]
    assert sweep.is_done(folder, limit=6) and sweep.is_done(folder, limit=5)
    sweep.run_point(*point, str(folder), runner=stuck, timeout=6)  # the same limit: kept as it is
    assert limits == [6] and not sweep.is_done(folder, limit=12)
    sweep.run_point(*point, str(folder), runner=stuck, timeout=12)  # more time asked for: run again
    assert limits == [6, 12]


def test_other_failures_are_recorded_and_retried(tmp_path):
    def failing(notebook, size, params, out, progress, timeout):
        raise harness.NotebookFailed("boom", "ValueError", "bad")

    folder = tmp_path / "points" / "x"
    assert sweep.run_point("01_chunked_loss", "ci", {}, str(folder), runner=failing)["status"] == "error"
    assert not sweep.is_done(folder)


@pytest.mark.parametrize(
    "grid,fragment",
    [
        ({}, "grid is empty"),
        ({"NOT_A_PARAM": [1, 2]}, "Its parameters: MODEL, DTYPE, SEQ_LEN"),
        ({"SEQ_LEN": ["long"]}, "SEQ_LEN='long' must be a whole number"),
    ],
)
def test_bad_sweeps_are_refused(grid, fragment):
    with pytest.raises(LongctxError, match=fragment):
        sweep.Sweep("01", "ci", grid)


@pytest.mark.parametrize(
    "items,fragment",
    [
        (["SEQ_LEN"], "KEY=V1,V2"),
        (["SEQ_LEN="], "no values"),
        (["SEQ_LEN=1", "SEQ_LEN=2"], "given twice"),
    ],
)
def test_bad_grid_text(items, fragment):
    with pytest.raises(LongctxError, match=fragment):
        sweep.parse_grid(items)


def test_grid_lists_keep_their_commas():
    assert sweep.parse_grid(["CPU_LENGTHS=[128,256],[512]", "SEQ_LEN=1e3"]) == {
        "CPU_LENGTHS": [[128, 256], [512]],
        "SEQ_LEN": [1000.0],
    }


def test_slurm_options_need_the_slurm_executor(tmp_path):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path)
    with pytest.raises(LongctxError, match="need --executor slurm"):
        sweep.run(sw, executor="local", slurm={"partition": "gpu"})
    bad = [
        ({"time": -5}, "--time must be a number ≥ 1"),
        ({"mem": 0}, "--mem must be a number ≥ 1"),
        ({"cpus_per_task": 0}, "--cpus-per-task must be"),
        ({"mem": float("nan")}, "--mem must be a number ≥ 1, got nan"),
        ({"mem": float("inf")}, "--mem must be a number ≥ 1, got inf"),
        ({"partition": "gpu"}, "slurm-debug rehearses on this machine and cannot honour --partition"),
        ({"gpus": 1}, "cannot honour --gpus"),
    ]
    for slurm, fragment in bad:
        with pytest.raises(LongctxError, match=fragment):
            sweep.run(sw, executor="slurm-debug", slurm=slurm)
    with pytest.raises(LongctxError, match="'a b' is not a SLURM name"):
        sweep.run(sw, executor="slurm", slurm={"account": "a b"})
    assert not tmp_path.joinpath(".longctx-sweep.json").exists()  # refused before the folder was claimed


def test_a_sweep_without_the_corpus_claims_nothing(tmp_path, monkeypatch):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "empty"))
    with pytest.raises(LongctxError, match="corpus is not built"):
        sweep.run(sw)
    assert not (tmp_path / "sw").exists() and not (tmp_path / "empty").exists()


def test_slurm_without_submitit_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path)
    with pytest.raises(LongctxError, match=r"pip install 'longctx\[slurm\]'"):
        sweep.run(sw, executor="slurm", slurm={"partition": "gpu"})


def test_a_point_is_reused_only_under_the_same_settings(tmp_path):
    a = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path)
    files.claim_folder(a.out, "sweep")  # as sweep.run does
    point = a.points()[0]
    folder = a.folder(point)
    folder.mkdir(parents=True)
    (folder / "point.json").write_text(json.dumps({"status": "ok", "key": a.key(point)}))
    assert a.pending() == []
    for other in (
        sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed={**FAST, "TILE_TOKENS": 64}, out=tmp_path),
        sweep.Sweep("01", "cpu", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path),
        sweep.Sweep("03", "ci", {"SEQ_LEN": [256]}, out=tmp_path),
    ):
        # another fixed value, size or notebook: a new folder, nothing reused, nothing removed
        assert other.pending() == other.points() and other.folder(point) != folder
    assert (folder / "point.json").exists()


def test_grid_values_are_points_once_and_never_share_a_folder(tmp_path):
    for repeated in ("SEQ_LEN=32,64,032", "CAPACITY_GIB=80,8e1", "SEQ_LEN=256,256"):
        with pytest.raises(LongctxError, match="gives one value twice"):
            sweep.parse_grid([repeated])
    sw = sweep.Sweep("05", "ci", {"PROBE_BACKEND": ["aot_eager"]}, out=tmp_path)
    alike = [{"PROBE_BACKEND": "aot_eager"}, {"PROBE_BACKEND": "aot/eager"}]  # the same slug, different values
    assert len({sw.folder(p) for p in alike}) == 2


@pytest.mark.slow
def test_a_live_sweeps_temporary_folder_is_left_alone(tmp_path):
    import socket

    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path)
    files.claim_folder(sw.out, "sweep")  # as sweep.run does
    point = sw.points()[0]
    sw.folder(point).mkdir(parents=True)
    (sw.folder(point) / "point.json").write_text(json.dumps({"status": "ok", "key": sw.key(point)}))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    host = socket.gethostname()
    live = tmp_path / "points" / f".other.tmp-{host}-{os.getpid()}"  # another sweep, running now
    gone = tmp_path / "points" / f".killed.tmp-{host}-{dead}"  # a sweep that was killed
    elsewhere = tmp_path / "points" / f".job.tmp-another-node-{dead}"  # a SLURM job on another host
    for folder in (live, gone, elsewhere):
        folder.mkdir()
    sweep.run(sw, progress=False)
    assert live.exists() and elsewhere.exists() and not gone.exists()


def test_a_notebook_copy_is_swept_as_itself_and_an_edit_is_a_new_experiment(tmp_path):
    import shutil

    copy = tmp_path / "mine" / "01_chunked_loss.ipynb"
    copy.parent.mkdir()
    shutil.copy(harness.notebooks()["01_chunked_loss"], copy)
    repo = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "a")
    mine = sweep.Sweep(str(copy), "ci", {"SEQ_LEN": [256]}, out=tmp_path / "b")
    assert mine.path == copy.resolve() and repo.key(repo.points()[0]) == mine.key(mine.points()[0])
    copy.write_text(copy.read_text().replace("# 01 · Chunked loss", "# 01 · Chunked loss (edited)"))
    edited = sweep.Sweep(str(copy), "ci", {"SEQ_LEN": [256]}, out=tmp_path / "b")
    assert edited.key(edited.points()[0]) != mine.key(mine.points()[0])


def test_a_bool_is_not_a_number_in_a_grid_and_a_damaged_record_reruns(tmp_path):
    assert sweep.parse_grid(["FIND_REACH=true,1"]) == {"FIND_REACH": [True, 1]}  # a bool is not a number here
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "point.json").write_text("{trunc")
    assert not sweep.is_done(folder)


def test_one_sweep_at_a_time_on_a_folder(tmp_path):
    import fcntl

    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path)
    files.claim_folder(sw.out, "sweep")
    with (tmp_path / ".lock").open("a+") as held:  # another sweep holds the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(LongctxError, match="Another sweep is running on"):
            sweep.run(sw, progress=False)
    assert not (tmp_path / "points").exists()


def test_a_value_both_fixed_and_swept_and_a_huge_grid_are_refused(tmp_path):
    with pytest.raises(LongctxError, match="SEQ_LEN given both as a fixed -p value and as a --grid key"):
        sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed={"SEQ_LEN": 512}, out=tmp_path)
    with pytest.raises(LongctxError, match="100,000 points"):
        sweep.Sweep("01", "ci", {"SEQ_LEN": list(range(1, 101)), "TILE_TOKENS": list(range(1, 1001))}, out=tmp_path)


def test_replaced_weights_are_a_new_experiment_and_points_run_a_snapshot(tmp_path):
    import shutil

    from longctx.paths import data_dir

    model = tmp_path / "model"
    shutil.copytree(data_dir() / "yarn-base", model)
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed={"MODEL": str(model)}, out=tmp_path / "sw")
    before = sw.key(sw.points()[0])
    raw = bytearray((model / "model.safetensors").read_bytes())
    raw[-100] ^= 0xFF
    (model / "model.safetensors").write_bytes(bytes(raw))
    assert sw.key(sw.points()[0]) != before
    files.claim_folder(sw.out, "sweep")
    snap = sweep._snapshot(sw)
    assert snap.read_bytes() == sw.path.read_bytes() and snap.parent.parent == sw.out / "source"
    snap.write_text(snap.read_text().replace("SEQ_LEN", "SEQ_LEN_EDITED"))  # the copy edited by hand
    assert sweep._snapshot(sw).read_bytes() == sw.path.read_bytes()  # checked on reuse, written again


def _left_behind(sid: int, out: Path) -> list[int]:
    """Processes of the sweep's session, and kernels (each in a session of its own, as jupyter_client starts
    them) whose working folder is a point's folder under `out`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid or str(out) in os.readlink(entry / "cwd"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# The CLI under a harness that prints every thread's stack on SIGUSR1: a sweep that ignores Ctrl-C says where.
_WITH_STACKS = (
    "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "from longctx.tools.cli import main; sys.exit(main())"  # as the `longctx` program runs it
)


def _why_still_running(pid: int, out: Path, log: Path) -> str:
    """What a hung sweep is doing: its threads' stacks, and every process of its session or under `out`."""
    os.kill(pid, signal.SIGUSR1)
    time.sleep(2)
    rows = []
    for p in sorted(set(_left_behind(pid, out)) | {pid}):
        try:
            cmd = (Path("/proc") / str(p) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
            state = (Path("/proc") / str(p) / "status").read_text().splitlines()[2]
            rows.append(f"{p} sid={os.getsid(p)} {state} {cmd}")
        except OSError:
            pass
    return "\n".join(rows) + "\n--- output and stacks ---\n" + log.read_text(errors="replace")[-8000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags,stop",
    [
        ("--jobs=1", signal.SIGINT),
        ("--jobs=2", signal.SIGINT),
        ("--jobs=2", signal.SIGTERM),
        ("--executor=slurm-local", signal.SIGINT),
    ],
    ids=["ctrl-c", "ctrl-c-2-jobs", "sigterm-2-jobs", "ctrl-c-slurm-local"],
)
def test_ctrl_c_stops_a_sweep_at_once_and_cleanly(tmp_path, flags, stop):
    # slurm-local runs as many points at once as there are cores (its controllers ignore the terminal's Ctrl-C)
    jobs = int(flags.removeprefix("--jobs=")) if flags.startswith("--jobs") else min(os.cpu_count() or 1, 4)
    if jobs > (os.cpu_count() or 1):
        pytest.skip(f"--jobs {jobs} needs {jobs} CPU cores")
    out, log = tmp_path / "sw", tmp_path / "sweep.log"
    # output to a file, not a pipe: the sweep's own exit is measured, whatever else still holds its output
    args = [sys.executable, "-c", _WITH_STACKS, *_cli(out, flags)[3:]]
    with log.open("w") as sink:
        proc = subprocess.Popen(args, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while len(list((out / "points").glob(".*.tmp-*"))) < jobs and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, log.read_text()
    if stop == signal.SIGINT:
        os.killpg(proc.pid, stop)  # what Ctrl-C in a terminal sends: the whole foreground group
    else:
        proc.send_signal(stop)  # `kill PID`, a service manager's stop: the main process alone
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        why = _why_still_running(proc.pid, out, log)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the sweep did not stop within 60 s of Ctrl-C:\n{why}")
    text = log.read_text()
    assert proc.returncode == 128 + stop, text
    assert ("longctx: interrupted" if stop == signal.SIGINT else "longctx: stopped (SIGTERM)") in text, text
    assert "Traceback" not in text, text
    time.sleep(2)  # a kernel already starting when the sweep was interrupted
    deadline = time.time() + 10
    while _left_behind(proc.pid, out) and time.time() < deadline:  # workers and kernels: gone at once
        time.sleep(0.2)
    assert not _left_behind(proc.pid, out)
    assert not _done(out)


def test_hidden_folders_the_notebook_default_model_and_the_library_are_in_the_key(tmp_path, monkeypatch):
    import shutil

    from longctx.paths import data_dir

    model = tmp_path / ".models" / "m"  # under a hidden folder, as in ~/.cache
    shutil.copytree(data_dir() / "yarn-base", model)
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed={"MODEL": str(model)}, out=tmp_path / "sw")
    before = sw.key(sw.points()[0])
    (model / "config.json").write_text(
        (model / "config.json").read_text().replace('"intermediate_size": 384', '"intermediate_size": 512')
    )
    assert sw.key(sw.points()[0]) != before
    # notebook 02 reads the base model by its own default MODEL = "base"
    yarn02 = sweep.Sweep("02", "ci", {"SEED": [1]}, out=tmp_path / "y")
    assert "MODEL" in yarn02._inputs(yarn02.points()[0])
    assert "longctx_source" in yarn02._versions


def test_the_machine_and_the_launched_scripts_are_in_the_key(tmp_path, monkeypatch):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    here = sw.key(sw.points()[0])
    assert sw.machine.startswith("none")  # this CPU machine
    elsewhere = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw", machine="cuda [85899345920]")
    assert elsewhere.key(elsewhere.points()[0]) != here
    # the scripts a notebook launches (scripts/sft_1m_context.py) count as the library's code
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    script = tmp_path / "repo" / "scripts" / "sft_1m_context.py"
    script.write_text("print('v1')")
    monkeypatch.setattr(sweep, "REPO", tmp_path / "repo")
    before = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")._versions["longctx_source"]
    script.write_text("print('v2')")
    assert sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")._versions["longctx_source"] != before


def test_edited_data_and_other_library_versions_are_in_the_key(tmp_path, monkeypatch):
    import shutil

    import numpy as np

    from longctx.paths import data_dir

    copy = tmp_path / "data"
    shutil.copytree(data_dir(), copy, ignore=shutil.ignore_patterns("downloads"))
    monkeypatch.setenv("LONGCTX_DATA", str(copy))
    before = sweep.Sweep("00", "ci", {"LORA_RANK": [4]}, out=tmp_path / "sw")
    assert {"peft", "datasets", "tokenizers", "numpy", "python"} <= set(before._versions)
    tokens = copy / "tokens-4096-train.npy"
    arr = np.load(tokens)
    np.save(tokens, np.random.default_rng(0).permutation(arr))  # edited by hand: the manifest still lists the old one
    after = sweep.Sweep("00", "ci", {"LORA_RANK": [4]}, out=tmp_path / "sw")
    assert after.key(after.points()[0]) != before.key(before.points()[0])
    manifest = json.loads((copy / "manifest.json").read_text())  # a rebuild by `longctx data` rewrites the manifest
    (copy / "manifest.json").write_text(json.dumps({**manifest, "tokens-4096-train.npy": "0" * 64}))
    rebuilt = sweep.Sweep("00", "ci", {"LORA_RANK": [4]}, out=tmp_path / "sw")
    assert rebuilt.key(rebuilt.points()[0]) != after.key(after.points()[0])


def test_a_point_key_reads_no_data_file_but_the_manifest(tmp_path, monkeypatch):
    from longctx.paths import data_dir

    read, original = [], Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or original(self))
    sw = sweep.Sweep("02", "ci", {"SEED": [1]}, out=tmp_path / "sw")  # its MODEL: the base model in data/
    sw.key(sw.points()[0])
    assert [p.name for p in read if data_dir() in p.parents] == ["manifest.json"]


def test_a_damaged_sweep_folder_is_refused_before_any_point_and_a_fifo_record_never_blocks(tmp_path):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path / "sw")
    files.claim_folder(sw.out, "sweep")
    (sw.out / "points").write_text("not a folder")
    (sw.out / "sweep.csv").mkdir()  # the table would fail only after every point ran
    with pytest.raises(LongctxError, match="points should be a folder that `longctx sweep` writes"):
        sweep.run(sw, progress=False)
    (sw.out / "points").unlink()
    with pytest.raises(LongctxError, match="sweep.csv should be a file that `longctx sweep` writes"):
        sweep.run(sw, progress=False)
    (sw.out / "sweep.csv").rmdir()
    point = sw.folder(sw.points()[0])
    point.mkdir(parents=True)
    os.mkfifo(point / "point.json")  # reading it would block forever: it reads as not finished, and runs again
    assert not sweep.is_done(point) and sweep.table(sw)[0]["status"] == "missing"
    record = sweep.run_point("01_chunked_loss", "ci", {}, str(point), runner=_finished, key=sw.key(sw.points()[0]))
    assert record["status"] == "ok" and sweep.is_done(point, record["key"]) and (point / "point.json").is_file()


def _finished(notebook, size, params, out, progress, timeout):
    from types import SimpleNamespace

    return SimpleNamespace(seconds=1.0, results={"results": {"peak_mib": 1.0}})


def test_slurm_without_sbatch_and_jobs_elsewhere_are_refused_before_the_folder_is_claimed(tmp_path, monkeypatch):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    with pytest.raises(LongctxError, match="sbatch, which is not on this machine's PATH"):
        sweep.run(sw, executor="slurm", progress=False)
    with pytest.raises(LongctxError, match="--jobs applies to --executor local"):
        sweep.run(sw, executor="slurm-local", jobs=2, progress=False)
    assert not (tmp_path / "sw").exists()


def test_a_metric_is_checked_against_the_flattened_names_the_table_shows(tmp_path):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path)
    done = [{"status": "error"}, {"status": "ok", "results": {"peak": {"plain_mib": 1.0}, "note": "x"}}]
    sweep._check_metric("peak.plain_mib", sw, done)  # a column of sweep.csv
    with pytest.raises(
        LongctxError, match=r"'peak\.plain' was not reported: the finished point reported the numbers peak\.plain_mib\."
    ):
        sweep._check_metric("peak.plain", sw, done)
    with pytest.raises(LongctxError, match=r"'note' is str, not a number to plot"):  # an empty plot otherwise
        sweep._check_metric("note", sw, done)


def test_a_metric_the_lesson_never_records_is_refused_before_any_point(tmp_path, capsys):
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    with pytest.raises(LongctxError, match=r"01_chunked_loss records no result 'tme' \(did you mean 'time'\?\)"):
        sweep.run(sw, metric="tme", progress=False)
    with pytest.raises(LongctxError, match="--metric is empty"):  # it would silently mean no plot
        sweep.run(sw, metric=" ", progress=False)
    with pytest.raises(LongctxError, match="has an empty part between dots"):
        sweep.run(sw, metric="measured..peak_gib", progress=False)
    assert not (tmp_path / "sw").exists()
    sweep._check_recorded("measured.chunked.peak_gib.extra", sw)  # the keys under a name are made as the lesson runs
    assert "so 'chunked.peak_gib.extra' is checked when the first point finishes" in capsys.readouterr().err
    # the keys of a dict written out in the lesson and passed as **values count; a computed one leaves it to the points
    code = 'values = {"peak": 1}\nsession.record(**values, time=2)'
    assert sweep._recorded(nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])).encode()) == {
        "peak",
        "time",
    }
    code = 'values = {name: 1 for name in "ab"}\nsession.record(**values)'
    assert sweep._recorded(nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])).encode()) is None


def _fake(tmp_path, monkeypatch, **outputs: str) -> None:
    """SLURM's client commands as scripts printing `outputs` (name → text), first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in outputs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\ncat <<'END'\n{text}\nEND\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_slurm_requests_are_checked_against_what_sinfo_lists(tmp_path, monkeypatch):
    from longctx.tools import slurm

    _fake(tmp_path, monkeypatch, sinfo="debug*|(null)|up\nbig|gpu:h100:8|up")
    slurm.check({})  # the default partition
    slurm.check({"partition": "big", "gpus": 8})
    with pytest.raises(LongctxError, match="SLURM has no partition 'gpu': sinfo lists big, debug"):
        slurm.check({"partition": "gpu"})
    with pytest.raises(LongctxError, match="--gpus 1: partition 'debug' has no GPUs"):
        slurm.check({"gpus": 1})
    down = tmp_path / "bin" / "sinfo"  # a controller that does not answer: SLURM's words on one line, and what to check
    down.write_text("#!/bin/sh\necho 'slurm_load_partitions: Unable to contact slurm controller' >&2\necho 'more' >&2\nexit 1\n")
    with pytest.raises(
        LongctxError, match=r"SLURM did not answer `sinfo .*` \(slurm_load_partitions: Unable to .* more\)\. Check"
    ):
        slurm.check({})
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no.conf"))  # SLURM would look for it until the time limit
    with pytest.raises(LongctxError, match=r"SLURM_CONF names .*no.conf, which is no file"):
        slurm.check({})


def test_slurm_task_states_come_from_squeue_while_queued_and_sacct_once_ended(tmp_path, monkeypatch):
    from longctx.tools import slurm

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
    record = slurm.ended_record("TIMEOUT", "exit code 0:0", "41", 2, tmp_path)
    assert record == {"status": "timed out", "error": "SLURM state TIMEOUT (exit code 0:0)"}
    _fake(tmp_path, monkeypatch, sacct="", squeue="")
    assert slurm.states("41") == {}
    _fake(tmp_path, monkeypatch, sacct="42|TIMEOUT|0:0\n41_0|COMPLETED|0:0", squeue="")
    assert slurm.states("42") == {0: ("TIMEOUT", "exit code 0:0")}  # a single point: a plain job, no array


def test_the_wait_ends_when_slurm_stops_answering_and_reports_tasks_it_ended(tmp_path, monkeypatch):
    from tqdm import tqdm

    from longctx.tools import slurm

    monkeypatch.setattr(slurm, "POLL", 0.01)
    folders = [tmp_path / "a", tmp_path / "b"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm, "SILENT_LIMIT", 0.05)
    with pytest.raises(LongctxError, match="SLURM has not answered .* Job array 7 is left as it is; run the same command"):
        slurm.wait("7", folders, lambda f: None, tqdm(total=2, disable=True))
    # one task done with its own record, one cancelled before it started: SLURM's account of the second
    _fake(tmp_path, monkeypatch, sacct="7_0|COMPLETED|0:0\n7_[1]|CANCELLED by 0|0:0", squeue="")
    ended = slurm.wait("7", folders, lambda f: "ok" if f.name == "a" else None, tqdm(total=2, disable=True))
    assert ended == {1: ("CANCELLED", "exit code 0:0")}


def test_a_forgotten_array_has_no_live_tasks_and_a_live_one_holds_every_executor_off_its_folder(tmp_path, monkeypatch):
    from longctx.tools import slurm

    out = tmp_path / "sw"
    out.mkdir()
    files.mark_claimed(out, "sweep")  # a sweep's folder, with the array it submitted
    (out / slurm.RECORD).write_text('{"array": "65", "tasks": 2}')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # slurmctld forgets an array MinJobAge after it ended; sacct still has it
    (bin_dir / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n")
    (bin_dir / "sacct").write_text("#!/bin/sh\necho '65_0|COMPLETED|0:0'\necho '65_1|COMPLETED|0:0'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert slurm.states("65") == {0: ("COMPLETED", "exit code 0:0"), 1: ("COMPLETED", "exit code 0:0")}
    slurm.still_running(out)  # nothing live: a re-run may go on
    _fake(tmp_path, monkeypatch, sacct="", squeue="65_1|RUNNING|None")
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=out)
    for executor in ("local", "slurm-local"):  # its live task would write the same points
        with pytest.raises(LongctxError, match="SLURM job array 65 of this sweep still has 1 task"):
            sweep.run(sw, executor=executor, progress=False)
    assert not (out / "points").exists()
    (bin_dir / "squeue").write_text("#!/bin/sh\necho 'Unable to contact slurm controller' >&2\nexit 1\n")
    _fake(tmp_path, monkeypatch, sacct="")  # another machine's SLURM, or none that answers: the way out is named
    with pytest.raises(LongctxError, match=rf"submitted job array 65 \({out / slurm.RECORD}\); if it has ended, remove"):
        sweep.run(sw, executor="local", progress=False)


def test_an_unknown_qos_is_refused_from_what_sacctmgr_lists(tmp_path, monkeypatch):
    from longctx.tools import slurm

    _fake(tmp_path, monkeypatch, sinfo="debug*|(null)|up", sacctmgr="normal\nhigh")
    slurm.check({"qos": "high"})
    with pytest.raises(LongctxError, match="SLURM has no QOS 'platinum': sacctmgr lists high, normal"):
        slurm.check({"qos": "platinum"})


def test_a_slurm_sweep_whose_points_are_all_done_writes_its_table_and_submits_nothing(tmp_path, monkeypatch):
    _fake(tmp_path, monkeypatch, sinfo="debug*|(null)|up", squeue="", sacct="")
    (tmp_path / "bin" / "sbatch").write_text('#!/bin/sh\necho submitted >> "$0.log"\nexit 1\n')
    (tmp_path / "bin" / "sbatch").chmod(0o755)
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    files.claim_folder(sw.out, "sweep")
    point = sw.points()[0]
    sw.folder(point).mkdir(parents=True)
    (sw.folder(point) / "point.json").write_text(json.dumps({"status": "ok", "key": sw.key(point), "results": {"t": 1}}))
    table = sweep.run(sw, executor="slurm", progress=False)
    assert list(csv.DictReader(table.open()))[0]["status"] == "ok"
    assert not (tmp_path / "bin" / "sbatch.log").exists()


def test_a_metric_is_plotted_against_a_first_key_of_lists_one_tick_each(tmp_path, monkeypatch):
    """Grid values that are lists (or text) are no x coordinates: each is a tick, in the grid's order, a failed point's
    status written at its own (a list there raised matplotlib's TypeError after every point had run)."""
    from longctx import plots

    fixed = {k: v for k, v in FAST.items() if k != "CPU_LENGTHS"}
    sw = sweep.Sweep("01", "ci", {"CPU_LENGTHS": [[64], [96, 128]], "SEQ_LEN": [256]}, fixed=fixed, out=tmp_path)
    files.claim_folder(sw.out, "sweep")
    for point, record in zip(sw.points(), ({"status": "ok", "results": {"t": 1.5}}, {"status": "oom"})):
        sw.folder(point).mkdir(parents=True)
        (sw.folder(point) / "point.json").write_text(json.dumps({**record, "key": sw.key(point)}))
    saved = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, name, folder: saved.append((fig, name)))
    sweep.write_table(sw, "t")
    [(fig, name)] = saved
    [ax] = fig.axes
    assert name == "sweep_t" and [t.get_text() for t in ax.get_xticklabels()] == ["[64]", "[96, 128]"]
    assert list(ax.lines[0].get_xdata()) == [0] and [a.get_text() for a in ax.texts] == ["oom"] and ax.texts[0].xy[0] == 1


def test_a_point_its_node_refuses_before_a_kernel_is_recorded_with_why(tmp_path, monkeypatch):
    """A SLURM task whose node refuses the point (its memory, its GPUs) leaves a record that says why, where before the
    array's account said only "FAILED (exit code 1)" and the sweep said the same command would retry it."""
    import signal

    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path)
    files.claim_folder(sw.out, "sweep")
    point = sw.points()[0]
    call = (str(sw.path), sw.size, {**sw.fixed, **point}, str(sw.folder(point)), None, sw.key(point), sw.limit)

    def refused(*args, **kwargs):
        raise LongctxError("01_chunked_loss: SEQ_LEN=256 is more than this machine can step")

    monkeypatch.setattr(harness, "checked_run", refused)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}  # what slurm_task sets for its task
    try:
        record = sweep.slurm_task(*call)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert record["status"] == "refused" and record["error"].endswith("is more than this machine can step")
    [row] = sweep.table(sw)
    assert row["status"] == "refused" and "more than this machine" in row["reason"]
    assert sw.pending() == [point]  # not a result: run again once the cause is changed
    left = sorted(p.name for p in (tmp_path / "points").iterdir())
    assert left == sorted([sw.folder(point).name, f".{sw.folder(point).name}.lock"])  # no temporary beside it


@pytest.mark.parametrize("executor", ["local", "slurm-local"])
def test_a_point_this_machine_cannot_step_is_refused_before_any_is_submitted(tmp_path, monkeypatch, executor):
    """Points that run here are checked as a run checks them, memory included, before the first starts: submitit's
    rehearsal only logged the refusal, and the sweep reported the point as missing."""
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256, 512]}, fixed=FAST, out=tmp_path / "sw")
    checked = []

    def refused(notebook, size, overrides, timeout):
        checked.append(overrides["SEQ_LEN"])
        if overrides["SEQ_LEN"] == 512:
            raise LongctxError("01_chunked_loss: SEQ_LEN=512 is more than this machine can step")

    monkeypatch.setattr(harness, "checked_run", refused)
    with pytest.raises(LongctxError, match="SEQ_LEN=512 is more than this machine can step"):
        sweep.run(sw, executor=executor, progress=False)
    assert checked == [256, 512] and not (tmp_path / "sw").exists()  # nothing claimed, nothing run


def test_a_point_folder_that_is_a_link_is_refused_before_anything_is_touched(tmp_path):
    """A point's folder is replaced whole when the point runs again: a link there (to a folder of the user's) was
    neither removed nor written through, but ended the sweep in a raw NotADirectoryError, its temporary left behind."""
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, fixed=FAST, out=tmp_path / "sw")
    files.claim_folder(sw.out, "sweep")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    (tmp_path / "sw" / "points").mkdir()
    sw.folder(sw.points()[0]).symlink_to(mine)
    with pytest.raises(LongctxError, match=r"SEQ_LEN-256__\w+ is a symbolic link: the sweep would replace it"):
        sweep.run(sw, progress=False)
    assert [p.name for p in (tmp_path / "sw" / "points").iterdir()] == [sw.folder(sw.points()[0]).name]
    assert (mine / "notes.txt").read_text() == "the user's"
