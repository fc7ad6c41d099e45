"""The harness, tested on the synthetic lesson (tests/lessons) where the machinery is the point: a lesson run at a size
into a folder of its own, its parameters checked once where they enter (the CLI, or the lesson's first cell when
papermill, nbconvert or JupyterLab runs it), and the rules every command keeps. A refusal is asserted by the parameter
or flag it names and by nothing written, never by its wording."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import papermill as pm
import pytest
from conftest import refused
from filelock import FileLock
from safetensors.torch import load_file

from longctx import LongctxError, files, notebook, pretrain
from longctx.run import harness, needs, schema
from longctx.tools import figures, sweep
from longctx.tools.cli import main


def _refused(capsys, argv) -> str:
    """What `longctx ARGV` printed on stderr, having exited with 2 (argparse's own refusals too)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: choices, types
        code = exc.code
    assert code == 2, argv
    return capsys.readouterr().err


def test_a_lesson_is_found_by_stem_number_or_title_and_ci_is_the_gpu_size_swapped(synthetic):
    assert harness.resolve("00") == harness.resolve("synthetic") == harness.resolve("00_synthetic")
    nb = harness.resolve("00")
    assert harness.declared_parameters(nb) == {"STEPS": 3, "SCALES": [1.0], "SLEEP": 0.0, "END": "save", "SEED": 0}
    assert harness.size_params(nb, "gpu") == {"STEPS": 5} and harness.size_params(nb, "ci") == {"STEPS": 2}


def test_values_are_read_as_papermills_p_and_y_read_them():
    given = ["A=4096", "B=1e-3", "C=True", "D=None", "E=tiny", "F=[128, 256]", "G=[null, 64]", "H=064", "I=[0200, yes]"]
    assert harness.parse_overrides(given) == {
        "A": 4096, "B": 1e-3, "C": True, "D": None, "E": "tiny", "F": [128, 256], "G": [None, 64], "H": 64,
        "I": [200, "yes"],  # a list's items as -p reads a value, not as YAML 1.1 (octal 0200, yes for True)
    }  # fmt: skip


# (argv, what the refusal names): each refused before any work, with exit status 2 and nothing written
REFUSED = [
    (["run", "00", "--size", "huge"], "--size"),
    (["run", "00", "-p", "STEPS=0"], "STEPS"),
    (["run", "00", "-p", "STEPS=2.5"], "STEPS"),
    (["run", "00", "-p", "STEPS=[1, 2]"], "STEPS"),
    (["run", "00", "-p", "SCALES=2"], "SCALES"),
    (["run", "00", "-p", "END=later"], "END"),
    (["run", "00", "-p", "BOGUS=1"], "BOGUS"),
    (["run", "00", "-p", "STEPS"], "STEPS"),
    (["run", "00", "-p", "STEPS=1", "-p", "STEPS=2"], "STEPS"),
    (["run", "00", "-p", "SCALES=[1, 2"], "[1, 2"),
    (["run", "00", "--timeout", "0"], "--timeout"),
    (["run", "00", "--size", "gpu"], "GPU"),
    (["run", "nope"], "nope"),
    (["run", "00", "--out", "new\nline"], "--out"),
    (["run", "00", "--out", ""], "--out"),  # not the default folder
    (["sweep", "00", "--grid", "STEPS=2,02"], "--grid"),  # 02 is 2, as -p reads it (not YAML 1.1's octal)
    (["sweep", "00", "--grid", "STEPS=1,1"], "--grid"),
    (["sweep", "00", "--grid", "STEPS=1", "-p", "STEPS=2"], "STEPS"),
    (["sweep", "00", "--grid", "STEPS=0,1"], "STEPS"),
    (["sweep", "00", "--grid", "STEPS=1", "--executor", "cloud"], "--executor"),
    (["sweep", "00", "--grid", "STEPS=1", "--jobs", "0"], "--jobs"),
    (["sweep", "00", "--grid", "STEPS=1", "--partition", "gpu"], "--partition"),
    (["sweep", "00", "--grid", "STEPS=1", "--metric", "totl"], "totl"),
    (["estimate", "--model", "nope", "--seq-len", "1k"], "nope"),
    (["estimate", "--model", "qwen3-0.6b", "--seq-len", "4q"], "4q"),
    (["estimate", "--model", "qwen3-0.6b", "--seq-len", "1k", "--attn", "flash"], "--attn"),
    (["estimate", "--model", "qwen3-0.6b", "--seq-len", "1k", "--cp-size", "3"], "cp_size"),
    (["estimate", "--model", "qwen3-0.6b", "--seq-len", "1k", "--replicas", "1.5"], "--replicas"),
    (["estimate", "--model", "qwen3-0.6b", "--seq-len", "1k", "--replicas", "1e308"], "--replicas"),
    (["plan", "--model", "qwen3-0.6b", "--seq-len", "1k", "--timeout", "1e308"], "--timeout"),
    (["plan", "--model", "qwen3-4b", "--seq-len", "1M", "--gpu", "inf"], "GPU"),
    (["pretrain", "--steps", "0"], "--steps"),
    (["pretrain", "--learning-rate", "7"], "--learning-rate"),
    (["pretrain", "--rope-theta", "0.5"], "--rope-theta"),
    (["pretrain", "--warmup-steps", "30", "--steps", "30"], "--warmup-steps"),
    (["pretrain", "--scheduler", "linear"], "--scheduler"),
    (["pretrain", "--answer-only"], "--retrieval"),
    (["pretrain", "--init", "/nowhere"], "/nowhere"),
]


@pytest.mark.parametrize("argv,named", REFUSED, ids=[" ".join(a).replace("\n", "|") for a, _ in REFUSED])
def test_a_bad_input_is_refused_naming_what_to_fix_and_nothing_is_written(synthetic, tmp_path, capsys, argv, named):
    out = ["--out", str(tmp_path / "out")] if argv[0] in ("run", "sweep", "pretrain") and "--out" not in argv else []
    err = _refused(capsys, [*argv, *out])
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variable,names", [("LONGCTX_NOTEBOOKS", "nowhere"), ("LONGCTX_NOTEBOOKS", "empty"),
                                            ("LONGCTX_DATA", "a-file"), ("LONGCTX_BUILD", "a-file")])  # fmt: skip
def test_a_folder_variable_naming_no_folder_of_its_kind_is_named(capsys, monkeypatch, tmp_path, variable, names):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(variable, str(tmp_path / names))
    assert variable in _refused(capsys, ["run", "00", "--size", "ci"])


# a real lesson's ranges and relations: (notebook, override, the parameter named)
RELATIONS = [
    ("03", "TIMED_STEPS=1", "TIMED_STEPS"), ("04", "RANKS=[2]", "RANKS"), ("04", "RANKS=[1,2,2]", "RANKS"),
    ("02", "FT_WINDOWS=90000", "FT_WINDOWS"), ("07", "SHARDS=[4,40000]", "SHARDS"), ("04", "RANKS=[1,64]", "RANKS"),
    ("00", "LEARNING_RATE=nan", "LEARNING_RATE"), ("00", "EVAL_EVERY=500", "EVAL_EVERY"), ("00", "ACCUM_STEPS=64", "ACCUM"),
    ("05", "MIN_LEN=600", "MIN_LEN"), ("04", "FULL_CP=128", "FULL_CP"), ("08", "BATCH_SIZES=[1024]", "BATCH_SIZES"),
    ("05", "RUN_PADS=[64,100]", "RUN_PADS"), ("02", "BETA_FAST=0.5", "BETA_FAST"), ("06", "GPUS=6", "GPUS"),
    ("04", "SEQ_LEN=1023", "SEQ_LEN"), ("02", "DATASET=deepmind/pg19", "deepmind/pg19"), ("00", "DTYPE=fp16", "DTYPE"),
    ("00", "MODEL=bogus", "bogus"), ("01", "CPU_LENGTHS=[128.0]", "CPU_LENGTHS"), ("01", "MODEL=qwen3-8b", "MODEL"),
    ("01", "SEED=4294967296", "SEED"), ("01", f"CPU_LENGTHS={list(range(1, schema.MAX_ITEMS + 2))}", "CPU_LENGTHS"),
    ("01", "MODEL=" + "z" * 3000, "MODEL"),  # a path the file system refuses (too long): its OSError, by name
    ("01", "SEQ_LEN=1", "SEQ_LEN"), ("07", "CPU_LENGTHS=[1, 64]", "CPU_LENGTHS"),  # one token has no next to predict
    ("01", "TILE_TOKENS=1", "TILE_TOKENS"), ("03", "TILE_VOCAB=1", "TILE_VOCAB"),  # a loss head of thousands of tiles
]  # fmt: skip


@pytest.mark.parametrize("name,override,named", RELATIONS, ids=[f"{n}-{o[:30]}" for n, o, _ in RELATIONS])
def test_a_lessons_ranges_and_relations_are_refused_before_a_kernel_starts(tmp_path, name, override, named):
    with pytest.raises(LongctxError) as err:
        harness.run(name, "cpu", harness.parse_overrides([override]), out=tmp_path / "out")
    assert named in str(err.value) and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_papermill_gets_the_same_refusals_in_the_lessons_first_cell(tmp_path, synthetic):
    """One per rule, through papermill itself (no longctx command): a range, a list passed by -p as text, a name the
    lesson lacks. Refused in the first code cell after the parameters, by name, before any work; a run outside the CLI
    gets a folder of its own each time. (Every lesson's first cell is that same call: test_lessons.)"""
    notebook = str(synthetic / "00_synthetic.ipynb")
    # session: a name the lesson lacks (papermill only warns, and injects it) and a later cell assigns
    for params, named in (({"STEPS": 0}, "STEPS"), ({"SCALES": "[1, 2]"}, "SCALES"), ({"session": 2}, "session")):
        with pytest.raises(pm.PapermillExecutionError) as err:
            pm.execute_notebook(notebook, str(tmp_path / "out.ipynb"), params, progress_bar=False, cwd=str(tmp_path))
        assert err.value.ename == "LongctxError" and named in err.value.evalue, err.value.evalue
        assert len(err.value.traceback) == 1  # the refusal's one line, without the kernel's frames
        assert err.value.exec_count <= 3  # its parameters, papermill's injected cell, the lesson's first
    interactive = Path(os.environ["LONGCTX_BUILD"]) / "interactive"
    assert not interactive.exists()  # refused before its folder was made
    for _ in range(2):  # papermill's -y passes a list
        pm.execute_notebook(notebook, str(tmp_path / "out.ipynb"), {"SCALES": [1, 2]}, progress_bar=False)
    runs = sorted((interactive / "00_synthetic").glob("*/results.json"))
    assert len(runs) == 2 and json.loads(runs[0].read_text())["results"]["total"] == (0 + 1 + 2) * (1 + 2)
    assert not (Path(os.environ["LONGCTX_BUILD"]) / "00_synthetic").exists()  # the CLI's default folder left free


def test_the_first_cell_checks_every_parameter_as_the_kernel_holds_it(synthetic):
    """A value of another type typed in a kernel, the cell run before the parameters cell: refused by name, no folder made."""
    base, runs = harness.declared_parameters(harness.resolve("00")), Path(os.environ["LONGCTX_BUILD"]) / "interactive"
    before = set(runs.rglob("*"))
    for namespace, named in (({**base, "STEPS": np.int64(2)}, "STEPS"), ({"SEED": 0}, "END")):
        with refused(named):
            notebook.start("00_synthetic", notebook.parameters(namespace))
    assert set(runs.rglob("*")) == before


def test_a_real_lessons_first_cell_refuses_what_its_cli_refuses():
    """The check a lesson's first cell makes (notebook.start → harness.check_lesson), on a model too big for this machine."""
    with pytest.raises(LongctxError) as err:
        harness.check_lesson("01_chunked_loss", {**harness.declared_parameters(harness.resolve("01")), "MODEL": "qwen3-8b"})
    assert "MODEL" in str(err.value)


@pytest.mark.slow
def test_a_run_writes_its_notebook_results_and_figures_and_never_imports_from_its_folder(synthetic, tmp_path):
    out = tmp_path / "out"
    first = harness.run("00", "ci", {"SCALES": [1, 2]}, out=out, progress=False)
    assert first.results["results"]["total"] == 3 and (out / "figures" / "synthetic_line.png").is_file()
    assert first.results["params"]["SCALES"] == [1, 2] and first.executed == out / "00_synthetic.ipynb"
    (out / "time.py").write_text("raise SystemExit('imported from the output folder')\n")  # the lesson imports time
    (out / "figures" / "old.png").write_bytes(b"an earlier run's")  # as if the last run had made it: replaced
    (out / "figures" / "mine.png").write_bytes(b"yours")  # a file the last run did not list: kept
    (out / "results.json").write_text(json.dumps(first.results | {"figures": [*first.results["figures"], "old.png"]}))
    again = harness.run("00", "ci", out=out, progress=False)
    assert again.results["results"]["total"] == 1 and not (out / "figures" / "old.png").exists()
    assert (out / "figures" / "mine.png").read_bytes() == b"yours" and "mine.png" not in again.results["figures"]
    with pytest.raises(harness.NotebookFailed):  # a failed run leaves the last one's outputs, its notebook beside
        harness.run("00", "ci", {"END": "oom"}, out=out, progress=False)
    assert json.loads((out / "results.json").read_text()) == again.results and (out / "00_synthetic.failed.ipynb").is_file()
    assert {p.name for p in (out / "figures").iterdir()} == {*again.results["figures"], "mine.png"}


@pytest.mark.slow
@pytest.mark.parametrize("end,ename", [("exit", "DeadKernelError"), ("oom", "OutOfMemoryError")])
def test_a_failed_run_says_why_and_leaves_no_results(synthetic, tmp_path, end, ename):
    with pytest.raises(harness.NotebookFailed) as err:
        harness.run("00", "ci", {"END": end}, out=tmp_path / "out", progress=False)
    assert err.value.ename == ename and not (tmp_path / "out" / "results.json").exists()
    assert (tmp_path / "out" / "00_synthetic.failed.ipynb").exists() or end == "exit"


def test_a_kernel_killed_while_the_machine_ran_out_of_memory_is_out_of_memory(monkeypatch):
    killed = SimpleNamespace(poll=lambda: -signal.SIGKILL)
    monkeypatch.setattr(harness, "_oom_kills", lambda: 8)
    assert harness._death(killed, 7)[0] == harness.OOM_KILLED  # the machine's count rose while it ran
    assert harness._death(killed, 8)[0] == "DeadKernelError"  # killed, but not by the OOM killer
    assert "SIGTERM" in harness._death(SimpleNamespace(poll=lambda: -signal.SIGTERM), 8)[1]
    assert "status 3" in harness._death(SimpleNamespace(poll=lambda: 3), 8)[1]


@pytest.mark.slow
def test_a_stuck_kernel_is_stopped_at_its_limit_with_everything_it_started(synthetic, tmp_path):
    with pytest.raises(harness.NotebookFailed) as err:
        harness.run("00", "ci", {"SLEEP": 600}, out=tmp_path / "out", progress=False, timeout=0.2)
    assert err.value.ename == harness.TIMED_OUT and "the kernel" in str(err.value)
    assert not (tmp_path / "out" / "results.json").exists()


def test_time_limits_come_from_the_declared_minutes(synthetic):
    assert harness.time_limit("00_synthetic", "ci")[0] == needs.LIMIT_FACTOR * 1 + needs.LIMIT_SLACK
    assert harness.time_limit("00_synthetic", "ci", 7.5)[0] == 7.5


def test_a_folder_the_command_did_not_write_is_refused_and_left_as_it_was(synthetic, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for argv in (["run", "00", "--out", str(mine)], ["sweep", "00", "--grid", "STEPS=1", "--out", str(mine)]):
        assert str(mine) in _refused(capsys, argv)
    with pytest.raises(LongctxError):
        sweep.Sweep("00", "ci", {"STEPS": [1]}, out=mine)
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"] and (mine / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_second_run_or_sweep_into_a_folder_in_use_is_refused(synthetic, tmp_path):
    starts = {"run": lambda out: harness.run("00", "ci", out=out, progress=False),
              "sweep": lambda out: sweep.run(sweep.Sweep("00", "ci", {"STEPS": [2]}, out=out), progress=False)}  # fmt: skip
    for command, start in starts.items():
        out = files.claim(tmp_path / command, command)
        with FileLock(out / ".lock"), refused(str(out)):  # another, still writing
            start(out)
        assert sorted(p.name for p in out.iterdir()) == [".lock", files.MARKER.format(command)]


def test_every_oserror_reaching_the_cli_is_one_line_naming_the_path(tmp_path, capsys, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "x.json"))

    monkeypatch.setattr("longctx.tools.cli._cmd_presets", full)
    assert main(["presets"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(tmp_path / "x.json") in err and "No space left" in err


def test_ctrl_c_while_the_command_starts_ends_it_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-m", "longctx", "list"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(0.5)  # its libraries still loading
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGINT and b"Traceback" not in out, out[-500:]


def test_an_estimate_that_runs_past_its_limit_is_stopped():
    cli = [sys.executable, "-m", "longctx.tools.cli", "estimate", "--model", "qwen3-0.6b", "--seq-len", "4k", "--timeout"]
    done = subprocess.run([*cli, "0.0005"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "--timeout" in done.stderr  # the flag that lifts the limit


def test_figures_claims_its_folder_and_runs_its_notebooks_under_it(tmp_path, monkeypatch):
    ran = []

    def stand_in(nb, size, out, **kwargs):  # the harness's run, writing only the figures regenerate copies
        ran.append(out)
        (out / "figures").mkdir(parents=True, exist_ok=True)
        for name in (n for n, owner in figures.GUIDE_FIGURES.items() if owner == nb):
            for ext in ("png", "svg"):
                (out / "figures" / f"{name}.{ext}").write_text(name)
        return SimpleNamespace(out=out, results={})

    monkeypatch.setattr(harness, "run", stand_in)
    monkeypatch.setattr(harness, "checked_run", lambda *a, **k: {})  # the lessons' checks are tested above
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "draft.tex").write_text("my paper")
    with refused("draft.tex"):
        figures.regenerate("ci", paper, progress=False)
    assert not ran and sorted(p.name for p in paper.iterdir()) == ["draft.tex"]
    assert figures.regenerate("ci", paper, progress=False, force=True) == paper  # --force: its files beside yours
    assert (paper / "draft.tex").read_text() == "my paper" and (paper / "index.md").exists()
    assert ran and all(r.parent == paper / figures.RUNS for r in ran)


def test_pretrain_never_replaces_a_model_without_force_and_writes_only_its_own_files(tmp_path, capsys):
    committed = pretrain.checkpoint_dir()
    before = {p.name: p.stat().st_mtime_ns for p in committed.iterdir()}
    assert "--force" in _refused(capsys, ["pretrain", "--steps", "1"])  # the default: the committed data/yarn-base
    assert {p.name: p.stat().st_mtime_ns for p in committed.iterdir()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    out = pretrain.pretrain(mine, steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False, force=True)
    assert (out / "notes.txt").read_text() == "keep me" and (out / "manifest.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no staging folder, no lock left beside it


def test_pretrain_goes_on_from_a_model_teaching_only_the_pass_keys(tmp_path):
    kw = dict(retrieval=1.0, answer_only=True, seq_len=40, steps=2, batch=2, warmup_steps=0, scheduler="constant")
    out = pretrain.pretrain(tmp_path / "r", init=str(pretrain.checkpoint_dir()), progress=False, **kw)
    m = pretrain.manifest(out)
    # the base's history kept; its longest trained position still the model's trained length
    assert m["init"] == pretrain.manifest() and m["trained_length"] == 128 and m["params"]["rope_theta"] == 100.0
    assert "--answer-only" in m["command"] and "--init" in m["command"] and "--rope-theta" not in m["command"]
    before, after = (load_file(p / "model.safetensors") for p in (pretrain.checkpoint_dir(), out))
    assert any(not (before[k] == after[k]).all() for k in before)  # trained on, from the base's weights
    windows = pretrain._with_pass_keys({"input_ids": [list(range(100, 140))] * 2}, 1.0, 40, seed=0, answer_only=True)
    for ids, labels in zip(windows["input_ids"], windows["labels"]):  # answer-only: the loss on the key's tokens alone
        taught = [t for t in labels if t != -100]
        assert len(taught) == 5 and taught == ids[-6:-1]  # the five digits before the full stop
