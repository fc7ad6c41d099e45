import re
from pathlib import Path

import pytest

from longctx import LongctxError
from longctx.run import harness, needs, schema
from longctx.tools.cli import main


def test_unknown_notebook():
    with pytest.raises(LongctxError, match="Unknown notebook 'nope'. Available: 00_memory_primer"):
        harness.run("nope", "ci")


def test_notebook_resolves_by_number_and_title():
    assert harness.resolve("00").stem == harness.resolve("memory_primer").stem == "00_memory_primer"


def test_unknown_size():
    with pytest.raises(LongctxError, match="Unknown size 'huge'"):
        harness.run("00", "huge")


def test_missing_size_file(tmp_path, monkeypatch):
    nb = harness.resolve("00")
    with pytest.raises(LongctxError, match="Available sizes: ci, cpu, gpu"):
        harness.size_params(nb, "tpu")


def test_unknown_parameter_is_named_with_the_valid_ones():
    with pytest.raises(LongctxError, match="has no parameter 'SEQLEN'.*SEQ_LEN"):
        harness.run("00", "ci", {"SEQLEN": 64})


@pytest.mark.parametrize(
    "key,value", [("SEQ_LEN", "long"), ("SEQ_LEN", 1.5), ("LEARNING_RATE", "fast"), ("MODEL", 3), ("SEQ_LEN", True)]
)
def test_wrong_type_is_refused(key, value):
    with pytest.raises(LongctxError, match=f"{key}=.+ must be"):
        harness.run("00", "ci", {key: value})


def test_overrides_parse_as_yaml_scalars():
    assert harness.parse_overrides(["SEQ_LEN=4096", "LEARNING_RATE=1e-3", "MODEL=tiny"]) == {
        "SEQ_LEN": 4096,
        "LEARNING_RATE": 1e-3,
        "MODEL": "tiny",
    }
    with pytest.raises(LongctxError, match="KEY=VALUE"):
        harness.parse_overrides(["SEQ_LEN"])


def test_every_size_file_names_only_declared_parameters():
    for name, nb in harness.notebooks().items():
        assert set(harness.sizes(nb)) >= {"ci", "cpu", "gpu"}, name
        for size in harness.sizes(nb):
            harness.check_parameters(nb, harness.size_params(nb, size), size)


def test_cli_reports_errors_with_exit_code_2(capsys):
    assert main(["run", "00", "--size", "ci", "-p", "BOGUS=1"]) == 2
    assert "has no parameter 'BOGUS'" in capsys.readouterr().err


def test_figures_refuses_a_folder_it_does_not_own_before_running_anything(tmp_path):
    from longctx.tools import figures

    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "draft.tex").write_text("my paper")
    with pytest.raises(LongctxError, match="draft.tex.*--force"):
        figures.regenerate("ci", paper, progress=False)
    assert (paper / "draft.tex").read_text() == "my paper" and sorted(p.name for p in paper.iterdir()) == ["draft.tex"]


def test_figures_moves_only_its_own_files_into_place(tmp_path):
    from pathlib import Path

    from longctx import files

    out = tmp_path / "paper"
    out.mkdir()
    (out / "draft.tex").write_text("my paper")
    writes = {"index.md", "long_context_scaling.png"}
    checked = files.check_out(out, "figures", writes=writes, force=True)
    with files.staging(checked) as tmp:  # what regenerate does once the notebooks ran
        (Path(tmp) / "index.md").write_text("# figures")
        files.place(Path(tmp), checked, "figures")
    assert (out / "draft.tex").read_text() == "my paper" and (out / "index.md").read_text() == "# figures"
    assert not list(tmp_path.glob(".paper.tmp-*"))  # the staging folder is gone
    # a later run may replace its own index.md, but the folder still holds draft.tex: refused without --force
    with pytest.raises(LongctxError, match="draft.tex"):
        files.check_out(out, "figures", writes=writes)
    (out / "draft.tex").unlink()
    assert files.check_out(out, "figures", writes=writes) == checked
    # --force keeps the user's files: in a folder the command has not written (no marker), a file with a name it
    # writes is the user's, refused rather than replaced
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "long_context_scaling.png").write_text("my plot")
    with pytest.raises(LongctxError, match="long_context_scaling.png.*cannot write there"):
        files.check_out(fresh, "figures", writes=writes, force=True)
    assert (fresh / "long_context_scaling.png").read_text() == "my plot"


def test_figures_runs_its_notebooks_under_the_out_folder_given(tmp_path, monkeypatch):
    """`figures --out X` writes nothing outside X: each notebook runs in X/runs/<notebook>, and X is its own again."""
    import shutil
    from types import SimpleNamespace

    from longctx.paths import build_dir
    from longctx.run import needs
    from longctx.tools import figures

    ran = []

    def stand_in(nb, size, out, **kwargs):  # the harness's run, writing only the figures regenerate copies
        ran.append(out)
        (out / "figures").mkdir(parents=True, exist_ok=True)
        for name in (n for n, owner in figures.GUIDE_FIGURES.items() if owner == nb):
            for ext in ("png", "svg"):
                (out / "figures" / f"{name}.{ext}").write_text(name)
        return SimpleNamespace(out=out, results={})

    monkeypatch.setattr(harness, "run", stand_in)
    monkeypatch.setattr(needs, "check", lambda *a: None)  # the machine's needs are tested elsewhere
    monkeypatch.setenv("LONGCTX_BUILD", str(tmp_path / "build"))
    out = tmp_path / "X"
    for _ in range(2):  # the second time into its own folder, runs/ included
        ran.clear()
        assert figures.regenerate("ci", out, progress=False) == out.resolve()
        assert ran and all(r.parent == out.resolve() / figures.RUNS for r in ran)
    assert not build_dir().exists()  # nothing in the default build folder, not even the folder
    failed = tmp_path / "Y"

    def fails(nb, size, out, **kwargs):  # the second notebook stops (a full disk, say): runs/ is left behind
        if ran:
            raise LongctxError("stopped")
        return stand_in(nb, size, out, **kwargs)

    ran.clear()
    monkeypatch.setattr(harness, "run", fails)
    with pytest.raises(LongctxError, match="stopped"):
        figures.regenerate("ci", failed, progress=False)
    monkeypatch.setattr(harness, "run", stand_in)
    assert figures.regenerate("ci", failed, progress=False) == failed.resolve()  # taken up again, not refused
    (out / figures.RUNS / "x").mkdir()
    (out / "runs2").write_text("mine")
    with pytest.raises(LongctxError, match="runs2"):
        figures.regenerate("ci", out, progress=False)
    (out / "runs2").unlink()
    lesson = out / figures.RUNS / sorted(set(figures.GUIDE_FIGURES.values()))[0]
    shutil.rmtree(lesson)
    lesson.symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # a lesson's run would be written there
    ran.clear()
    with pytest.raises(LongctxError, match=f"{lesson} is a link: figures runs its notebooks in folders of its own"):
        figures.regenerate("ci", out, progress=False)
    assert not ran and not (tmp_path / "elsewhere").exists()


def test_run_and_sweep_refuse_a_folder_they_did_not_write(tmp_path):
    import shutil

    from longctx.tools import sweep

    mine = tmp_path / "work"
    mine.mkdir()
    shutil.copy(harness.notebooks()["02_yarn"], mine / "02_yarn.ipynb")
    (mine / "results.json").write_text("{}")
    with pytest.raises(LongctxError, match="holds files `longctx run` did not write"):
        harness.run("02", "ci", out=mine)
    with pytest.raises(LongctxError, match="holds files `longctx sweep` did not write"):
        sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=mine)
    assert sorted(p.name for p in mine.iterdir()) == ["02_yarn.ipynb", "results.json"]
    assert (mine / "results.json").read_text() == "{}"


def test_a_claimed_folder_is_reused_only_as_the_claim_left_it(tmp_path):
    from longctx import files

    forged = tmp_path / "forged"  # someone's folder with a hand-made marker
    forged.mkdir()
    (forged / ".longctx-run.json").write_text('["x"]')
    (forged / "results.json").write_text("precious")
    with pytest.raises(LongctxError, match=r"did not write \(.longctx-run.json, results.json\)"):  # its marker too
        files.claim_folder(forged, "run")
    assert (forged / "results.json").read_text() == "precious"

    claimed = files.claim_folder(tmp_path / "claimed", "run")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (claimed / "figures").symlink_to(theirs)  # a later run would write its figures into `theirs`
    with pytest.raises(LongctxError, match="figures is a symbolic link"):
        files.claim_folder(claimed, "run")
    assert list(theirs.iterdir()) == []


def test_pretrain_never_overwrites_a_model_without_force(tmp_path, capsys):
    from longctx.levers import base_model
    from longctx.tools.cli import main

    committed = base_model.checkpoint_dir()
    before = {p.name: p.stat().st_mtime_ns for p in committed.iterdir()}
    assert main(["pretrain", "--steps", "1"]) == 2  # default target: the committed data/yarn-base
    err = capsys.readouterr().err
    assert "is not empty" in err and "--force" in err
    assert {p.name: p.stat().st_mtime_ns for p in committed.iterdir()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["pretrain", "--out", str(mine), "--steps", "1"]) == 2
    out = base_model.pretrain(mine, steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False, force=True)
    assert (out / "notes.txt").read_text() == "keep me" and (out / "manifest.json").exists()
    assert not (out / "run").exists() and not list(tmp_path.glob(".mine.tmp-*"))
    (out / "model.safetensors").unlink()
    (out / "model.safetensors").mkdir()  # a folder where the weights go: refused before training, nothing moved
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    with pytest.raises(LongctxError, match="model.safetensors is a folder where longctx writes a file"):
        base_model.pretrain(mine, steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False, force=True)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_one_pretrain_at_a_time_into_a_folder_and_never_from_weights_that_are_not_finite(tmp_path):
    import shutil

    from filelock import FileLock
    from safetensors.torch import load_file, save_file

    from longctx.levers import base_model

    out = tmp_path / "mine"
    with FileLock(tmp_path / ".mine.pretrain.lock"):  # another pretrain into the same folder, still training
        with pytest.raises(LongctxError, match="Another pretrain is writing into"):
            base_model.pretrain(out, steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False)
    assert not out.exists()
    init = tmp_path / "nan-base"
    shutil.copytree(base_model.checkpoint_dir(), init)
    weights = load_file(init / "model.safetensors")
    weights[name := sorted(weights)[0]][0, 0] = float("nan")
    save_file(weights, init / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LongctxError, match=f"{init / 'model.safetensors'}: {name} holds NaN or infinite numbers"):
        base_model.pretrain(out, init=str(init), steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False)
    assert not out.exists()
    from longctx import models

    with pytest.raises(LongctxError, match=f"weight {name} holds NaN or infinite numbers"):  # a lesson's load too
        models.load(str(init))
    shutil.rmtree(init)
    base_model.pretrain(out, steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # its lock gone with it, beside the user's folder


def test_pretrain_goes_on_from_a_model_teaching_only_the_pass_keys(tmp_path):
    from safetensors.torch import load_file

    from longctx.levers import base_model

    kw = dict(retrieval=1.0, answer_only=True, seq_len=40, steps=2, batch=2, warmup_steps=0, scheduler="constant")
    out = base_model.pretrain(tmp_path / "r", init=str(base_model.checkpoint_dir()), progress=False, **kw)
    m = base_model.manifest(out)
    # the base's history kept; its longest trained position still the model's trained length
    assert m["init"] == base_model.manifest() and m["trained_length"] == 128 and m["params"]["rope_theta"] == 100.0
    assert "--answer-only" in m["command"] and "--init" in m["command"] and "--rope-theta" not in m["command"]
    before, after = (load_file(p / "model.safetensors") for p in (base_model.checkpoint_dir(), out))
    assert any(not (before[k] == after[k]).all() for k in before)  # trained on, from the base's weights
    # answer-only: a pass-key document's loss is on its key's tokens alone
    windows = base_model._with_pass_keys({"input_ids": [list(range(100, 140))] * 2}, 1.0, 40, seed=0, answer_only=True)
    for ids, labels in zip(windows["input_ids"], windows["labels"]):
        taught = [t for t in labels if t != -100]
        assert len(taught) == 5 and taught == ids[-6:-1]  # the five digits before the full stop


def test_place_checks_every_target_before_the_first_move(tmp_path):
    from pathlib import Path

    from longctx import files

    out = tmp_path / "out"
    out.mkdir()
    (out / "b.png").mkdir()
    with files.staging(out) as tmp:
        for name in ("a.md", "b.png"):
            (Path(tmp) / name).write_text(name)
        with pytest.raises(LongctxError, match="b.png is a folder"):
            files.place(Path(tmp), out, "figures")
    assert sorted(p.name for p in out.iterdir()) == ["b.png"]  # a.md was not placed alone


def test_values_parse_the_way_a_person_reads_them():
    parsed = harness.parse_overrides(
        ["A=064", "B=1:04", "C=yes", "D=2024-01-01", "E=[null, 64, auto]", "F=true", "G='007'", "H=1e-3"]
    )
    assert parsed == {
        "A": 64,
        "B": "1:04",
        "C": "yes",
        "D": "2024-01-01",
        "E": [None, 64, "auto"],
        "F": True,
        "G": "007",
        "H": 1e-3,
    }
    with pytest.raises(LongctxError, match="SEQ_LEN=None must be a whole number, not NoneType"):
        harness.run("00", "ci", harness.parse_overrides(["SEQ_LEN=None"]))


def _notebook_with(tmp_path, name: str, cell: str) -> Path:
    """00's parameters cell and `cell`, as a notebook file of its own (a notebook path runs that file)."""
    import nbformat

    original = nbformat.read(harness.notebooks()["00_memory_primer"], as_version=4)
    params = next(c for c in original.cells if "parameters" in c.metadata.get("tags", []))
    mine = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(cell)])
    mine.metadata = original.metadata
    path = tmp_path / name / "00_memory_primer.ipynb"
    path.parent.mkdir()
    nbformat.write(mine, path)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "cell,oom_killer_acts,ename,fragment",
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", True, harness.OOM_KILLED, "out-of-memory killer stopped the kernel"),
        ("os.kill(os.getpid(), signal.SIGKILL)", False, "DeadKernelError", "counted no out-of-memory kill"),
        ("os._exit(3)", False, "DeadKernelError", "counted no out-of-memory kill"),
        ("os._exit(3)", None, "DeadKernelError", "Whether memory ran out cannot be told here"),
    ],
    ids=["oom-killed-is-memory", "killed-otherwise-is-not", "exited-is-not", "no-cgroup-no-blame"],
)
def test_a_notebook_path_runs_that_file_and_a_dead_kernel_is_told_by_its_cause(
    tmp_path, monkeypatch, cell, oom_killer_acts, ename, fragment
):
    from longctx import children

    path = _notebook_with(tmp_path, "copy", f"import os, signal\n{cell}")
    assert harness.resolve(str(path)) == path.resolve()
    # what the kernel's own memory cgroup says after the death (the next test makes a real one)
    monkeypatch.setattr(children.OwnMemory, "oom_killed", lambda self: oom_killer_acts)
    with pytest.raises(harness.NotebookFailed, match=fragment) as err:
        harness.run(str(path), "ci", out=tmp_path / "out", progress=False)
    assert err.value.ename == ename
    assert ("lower the lengths" in str(err.value)) == bool(oom_killer_acts)  # memory is blamed only on evidence
    assert not (tmp_path / "out" / "results.json").exists()


# A kernel that lowers its own cgroup's limit below what it then allocates, and offers itself to the OOM killer first
OOM_CELL = """
from pathlib import Path
line = next(l for l in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in l)
cgroup = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
Path("/proc/self/oom_score_adj").write_text("1000")
used = int((cgroup / "memory.usage_in_bytes").read_text())
(cgroup / "memory.limit_in_bytes").write_text(str(used + 200 * 2**20))
held = bytearray(2**30)
"""


@pytest.mark.slow
def test_two_points_at_once_only_the_oom_killed_one_is_oom(tmp_path):
    from tqdm import tqdm

    from longctx import children
    from longctx.tools import sweep

    with children.OwnMemory() as probe:
        if probe.oom_killed() is None or not (probe.path / "memory.limit_in_bytes").exists():
            pytest.skip("Linux lets this process make no cgroup v1 memory cgroup (not root?): nothing to pin a kill on")
    eaten = _notebook_with(tmp_path, "eaten", OOM_CELL)
    # the other point dies at the same time, by a signal: the machine's OOM count rises meanwhile, its own does not
    other = _notebook_with(tmp_path, "other", "import os, signal, time\ntime.sleep(20)\nos.kill(os.getpid(), signal.SIGKILL)")
    calls = [(str(nb), "ci", {}, str(tmp_path / f"point-{nb.parent.name}")) for nb in (eaten, other)]
    records = children.pool_map(sweep._run_call, calls, 2, tqdm(disable=True))
    assert [r["status"] for r in records] == ["oom", "died"], [r.get("error") for r in records]
    assert records[0]["error"].startswith(harness.OOM_KILLED) and records[1]["error"].startswith("DeadKernelError")


@pytest.mark.parametrize(
    "name,override,fragment",
    [
        ("03", "TIMED_STEPS=1", "TIMED_STEPS=1 must be at least 2"),
        ("04", "RANKS=[2]", "must contain 1"),
        ("04", "RANKS=[]", "must not be empty"),
        ("04", "RANKS=[1,2,2]", r"RANKS=\[1, 2, 2\] must not repeat a value"),  # (two launches of 2; one point drawn)
        ("02", "PROBE_DEPTHS=[0.5,0.5]", "must not repeat a value"),
        ("02", "FT_WINDOWS=90000", r"FT_WINDOWS=90,000 is more than this machine can step: .* past the [\d,]+ longctx estimates"),
        ("07", "SHARDS=[4,40000]", r"SHARDS=\[4, 40000\] has 40000, over SEQ_LEN"),  # (torch.chunk: one token a shard)
        ("04", "RANKS=[1,64]", "asks for 64 processes"),
        ("00", "OVERFIT_STEPS=0", "must be positive"),
        ("00", "LEARNING_RATE=nan", "must be a finite number"),
        ("00", "EVAL_EVERY=500", "must be at most OVERFIT_STEPS"),
        ("00", "ACCUM_STEPS=64", r"ACCUM_MICRO_BATCH=\d+ × ACCUM_STEPS=64 must be at most TRAIN_SEQS"),  # (fewer, unsaid)
        ("00", "BATCH=65", "BATCH=65 must be at most TRAIN_SEQS"),
        ("05", "MIN_LEN=600", "must be below MAX_LENGTH"),
        ("04", "FULL_CP=128", "FULL_CP=128 cannot split qwen3-4b's .* at most 64 GPUs"),  # the lesson's plan check
        ("04", "FULL_CP=0", "FULL_CP=0 must be at least 2"),  # (a relation dividing by it is not reached)
        ("03", "HOST_GPUS=0", "HOST_GPUS=0 must be a power of two"),
        ("08", "BATCH_SIZES=[1024]", r"BATCH_SIZES=\[1024\] has 1024, over N_DOCS"),  # (0 of 0 padded: NaN)
        ("05", "RUN_PADS=[64,100]", r"RUN_PADS=\[64, 100\] has 100, which does not divide MAX_LENGTH"),
        ("02", "BETA_FAST=0.5", r"BETA_FAST=0.5 must be above beta_slow \(1, transformers' default"),
        ("06", "GPUS=6", "power of two"),
    ],
)
def test_ranges_and_relations_are_refused_before_a_kernel_starts(tmp_path, name, override, fragment):
    with pytest.raises(LongctxError, match=fragment):
        harness.run(name, "cpu", harness.parse_overrides([override]), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_full_disk_leaves_no_truncated_figure_and_says_so(tmp_path, monkeypatch):
    import errno

    from longctx import plots

    fig = plots.plt.figure()
    plots.save_figure(fig, "kept", tmp_path)
    before = (tmp_path / "kept.png").read_bytes()

    def full(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"half a figure")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(fig), "savefig", full)
    with pytest.raises(LongctxError, match="The disk is full while writing .*kept.png"):
        plots.save_figure(fig, "kept", tmp_path)
    assert (tmp_path / "kept.png").read_bytes() == before  # the earlier figure, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.png", "kept.svg"]


def test_broken_inputs_end_in_a_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    from longctx import models
    from longctx.memory.estimate import estimate
    from longctx.tools import sweep
    from longctx.tools.cli import main

    with pytest.raises(LongctxError, match="No model config at missing/config.json"):
        models.config("missing/config.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(LongctxError, match="Cannot read a model config"):
        models.config(str(bad))
    with pytest.raises(LongctxError, match="longctx estimates up to"):
        estimate("tiny", 10**12)
    nb = harness.resolve("00")
    params = tmp_path / "notebooks" / "params" / "00_memory_primer"
    params.mkdir(parents=True)
    (params / "odd.yaml").write_text("SEQ_LEN: [1, 2\n")
    monkeypatch.setattr(harness, "notebooks_dir", lambda: tmp_path / "notebooks")
    with pytest.raises(LongctxError, match="odd.yaml is not valid YAML"):
        harness.size_params(nb, "odd")
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256]}, out=tmp_path / "sw")
    with pytest.raises(LongctxError, match="sbatch, which is not on this machine's PATH"):
        sweep.run(sw, executor="slurm", progress=False)
    assert main(["--debug", "run", "00", "--size", "huge"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "longctx: error: Unknown size 'huge'" in err


def test_a_nested_metric_typo_is_refused_after_the_first_finished_point(tmp_path):
    import json

    from longctx import files
    from longctx.tools import sweep

    sw = sweep.Sweep("01", "ci", {"SEQ_LEN": [256, 512]}, out=tmp_path)
    files.claim_folder(sw.out, "sweep")  # as sweep.run does, before the finished point below
    first = sw.points()[0]
    sw.folder(first).mkdir(parents=True)
    (sw.folder(first) / "point.json").write_text(
        json.dumps({"status": "ok", "key": sw.key(first), "results": {"measured": {"chunked": {"peak_gib": 1.0}}}})
    )
    # "measured" is a result the lesson's code records; what it holds is known once a point has run
    with pytest.raises(LongctxError, match=r"'measured\.chunkd\.peak_gib' was not reported.*measured\.chunked\.peak_gib"):
        sweep.run(sw, metric="measured.chunkd.peak_gib", progress=False)
    assert not sw.folder(sw.points()[1]).exists()  # the second point never ran


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--learning-rate", "nan"], "--learning-rate must be a positive finite number"),
        (["--learning-rate", "7"], "--learning-rate must be at most 1"),  # weights overflow past it
        (["--rope-theta", "0"], "--rope-theta must be a positive finite number"),
        (["--rope-theta", "0.5"], "--rope-theta must be above 1"),  # no position told apart: losses of 0 teach nothing
        (["--steps", "0"], "--steps must be an integer ≥ 1"),
        (["--warmup-steps", "-5"], "--warmup-steps must be an integer ≥ 0"),
        (["--warmup-steps", "30", "--steps", "30"], "--warmup-steps must be below --steps (30)"),  # all warmup
        (["--preset", "bogus"], "Unknown model preset 'bogus'"),
        (["--answer-only"], "give --retrieval a share above 0"),
        (["--scheduler", "linear"], "--scheduler is one of cosine, constant"),
        (["--init", "/nonexistent-model"], "--init /nonexistent-model: no model trained by `longctx pretrain`"),
        (["--init", "data/yarn-base", "--rope-theta", "5"], "drop --rope-theta"),
        (["--batch", "1000000", "--steps", "1"], "one step's logits and their gradient alone take"),
    ],
)
def test_pretrain_options_are_refused_by_their_flag(tmp_path, capsys, args, fragment):
    from longctx.tools.cli import main

    assert main(["pretrain", "--out", str(tmp_path / "new"), *args]) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_bad_models_and_notebooks_are_refused_before_a_kernel(tmp_path):
    from transformers import LlamaConfig

    from longctx.memory.estimate import estimate

    with pytest.raises(LongctxError, match="Unknown model 'bogus'"):
        harness.run("00", "ci", {"MODEL": "bogus"}, out=tmp_path / "a")
    with pytest.raises(LongctxError, match="RANKS=\\[True, 2\\] has True, which must be a whole number"):
        harness.run("04", "ci", {"RANKS": [True, 2]}, out=tmp_path / "b")
    with pytest.raises(LongctxError, match="CPU_LENGTHS=\\['256'\\] has '256', which must be a whole number"):
        harness.run("01", "ci", {"CPU_LENGTHS": ["256"]}, out=tmp_path / "c")
    with pytest.raises(LongctxError, match="5 attention heads and 2 key/value heads"):
        estimate(LlamaConfig(num_attention_heads=5, num_key_value_heads=2, hidden_size=40), 128)
    with pytest.raises(LongctxError, match="x.ipynb is not a readable notebook"):
        (tmp_path / "x.ipynb").write_text("{}")
        harness.run(str(tmp_path / "x.ipynb"), "ci", out=tmp_path / "d")
    broken = tmp_path / "copy" / "00_memory_primer.ipynb"
    broken.parent.mkdir()
    broken.write_text("not a notebook")
    with pytest.raises(LongctxError, match="is not a readable notebook"):
        harness.run(str(broken), "ci", out=tmp_path / "d")
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_empty_values_and_folders_are_named(capsys):
    from longctx.tools.cli import main

    with pytest.raises(LongctxError, match="has no value after '='"):
        harness.parse_overrides(["SEQ_LEN="])
    assert main(["run", "00", "--size", "ci", "--out", ""]) == 2
    assert "--out is empty" in capsys.readouterr().err
    assert main(["plan", "--model", "qwen3-4b", "--seq-len", "1M", "--gpu-memory", "inf"]) == 2
    assert "GPU memory must be a positive number of GiB up to" in capsys.readouterr().err


def test_cp_lengths_and_dataset_files_are_checked_before_a_kernel(tmp_path):
    with pytest.raises(LongctxError, match="SEQ_LEN=1023 must be a multiple of 2 × the largest of RANKS = 8"):
        harness.run("04", "cpu", {"SEQ_LEN": 1023}, out=tmp_path / "a")
    with pytest.raises(LongctxError, match="is a file but not a parquet file"):
        harness.run("02", "ci", {"DATASET": "/etc/hostname"}, out=tmp_path / "b")


def test_a_notebook_is_never_its_own_output(tmp_path):
    import shutil

    home = tmp_path / "00_memory_primer"
    home.mkdir()
    shutil.copy(harness.notebooks()["00_memory_primer"], home / "00_memory_primer.ipynb")
    with pytest.raises(LongctxError, match="is inside the output folder"):
        harness.run(str(home / "00_memory_primer.ipynb"), "ci", out=home)
    assert (home / "00_memory_primer.ipynb").exists()


def test_second_fuzz_pass_inputs_are_refused_before_a_kernel(tmp_path):
    nb = tmp_path / "00_memory_primer.ipynb"
    import nbformat

    original = nbformat.read(harness.notebooks()["00_memory_primer"], as_version=4)
    cell = next(c for c in original.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = "SEQ_LEN = 2**7"
    nbformat.write(original, nb)
    with pytest.raises(LongctxError, match="must assign plain literals"):
        harness.run(str(nb), "ci", out=tmp_path / "a")
    for name, override, fragment in (
        ("00", {"MODEL": "/etc/hostname"}, "Unknown model '/etc/hostname'"),
        ("01", {"CPU_LENGTHS": [128.0, 512]}, "has 128.0, which must be a whole number"),
        ("05", {"RUN_PADS": [0]}, "has 0, which must be null"),
        ("05", {"BACKEND": "bogus"}, "must be one of auto, inductor"),
        ("06", {"SEQ_LEN": 1000001}, "must be a multiple of 2 × GPUS = 16"),
        ("02", {"BETA_FAST": "bogus"}, "BETA_FAST='bogus' must be a finite number"),
    ):
        with pytest.raises(LongctxError, match=fragment):
            harness.run(name, "ci", override, out=tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_relative_model_path_reaches_the_kernel_absolute(tmp_path, monkeypatch):
    from longctx.paths import REPO

    monkeypatch.chdir(REPO)
    assert harness._absolute("data/yarn-base") == str(REPO / "data" / "yarn-base")
    assert harness._absolute("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


def test_pretrain_never_writes_into_the_data_folder_itself(capsys):
    from longctx.paths import data_dir
    from longctx.tools.cli import main

    assert main(["pretrain", "--out", str(data_dir()), "--force", "--steps", "1"]) == 2
    assert "is the data folder itself" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (["run", "00", "--size", "ci", "--out", "/tmp/" + "a" * 300], "--out '/tmp/aaa.*is too long to name a file"),
        (["run", "00", "--size", "ci", "-p", "MODEL=" + "a" * 300], "The model 'aaa.*is too long"),
        (["estimate", "--model", "a" * 300, "--seq-len", "1k"], "is too long"),
        (["estimate", "--model", "", "--seq-len", "1k"], "The model is '': name a preset"),
        (["run", "00", "--size", "ci", "--out", "~no-such-user-here/x"], "this machine has no such user"),
        (["run", "00", "--size", "ci", "-p", "SEQ_LEN=" + "9" * 5000], "5000 digits"),
        (["pretrain", "--seq-len", "1", "--out", "/tmp/never-made"], "--seq-len must be an integer ≥ 2"),
        (["estimate", "--model", "a" * 97 + "/b", "--seq-len", "1k"], "Unknown model preset"),
        (["run", "00", "--size", "ci", "--out", "   "], "--out is empty"),
        (["pretrain", "--out", "/tmp/" + "p" * 250, "--steps", "1"], "at most 191 bytes a name"),  # room for temporaries
        (["run", "00", "--size", "ci", "-p", "SEED=4294967296"], "SEED=4294967296 must be at most 4,294,967,295"),
        (["pretrain", "--seed", "4294967296", "--out", "/tmp/never-made"], "--seed must be below 4,294,967,296"),
        (["run", "00", "--size", "ci", "-p", "SEED=1", "-p", "SEED=2"], "SEED is given twice"),
        (["run", "/any/dir/00_memory_primer", "--size", "ci"], "is a path but not a notebook file"),
        (["estimate", "--model", "qwen3-0.6b", "--seq-len", "9" * 5000], "characters\\)' is not a positive integer"),
    ],
)
def test_names_and_numbers_no_file_system_can_take_are_refused_plainly(argv, fragment, capsys):
    from longctx.tools.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and re.search(fragment, err), err


def test_notebook_02_without_its_base_model_is_refused_before_a_kernel(tmp_path, monkeypatch):
    import shutil

    from longctx.paths import data_dir

    shutil.copytree(data_dir() / "corpus", tmp_path / "corpus")  # the corpus, but no yarn-base
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path))
    with pytest.raises(LongctxError, match="No pretrained base model"):
        harness.run("02", "ci", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_loop_of_links_and_a_home_that_does_not_exist_are_refused_plainly(tmp_path, monkeypatch, capsys):
    from longctx.tools.cli import main

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert main(["run", "00", "--size", "ci", "--out", str(tmp_path / "a")]) == 2
    assert "a loop of symbolic links" in capsys.readouterr().err
    (tmp_path / "nowhere").symlink_to(tmp_path / "gone" / "x.json")  # a write would create its target
    assert main(["run", "00", "--size", "ci", "--out", str(tmp_path / "nowhere")]) == 2
    assert "is a symbolic link to" in capsys.readouterr().err and not (tmp_path / "gone").exists()
    monkeypatch.setenv("LONGCTX_BUILD", "~no-such-user-here/build")
    assert main(["run", "00", "--size", "ci"]) == 2
    assert "LONGCTX_BUILD '~no-such-user-here/build' starts with" in capsys.readouterr().err


def test_a_refused_command_leaves_no_data_or_build_folder_behind(tmp_path, monkeypatch, capsys):
    """The data and build folders are made by the command that writes into them, not on being named."""
    from longctx.tools.cli import main

    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "new-data"))
    monkeypatch.setenv("LONGCTX_BUILD", str(tmp_path / "new-build"))
    assert main(["run", "02", "--size", "ci"]) == 2  # its miniature is not there
    assert "No pretrained base model" in capsys.readouterr().err
    assert main(["run", "00", "--size", "ci"]) == 2  # nor the corpus
    assert "run `longctx data`" in capsys.readouterr().err
    assert main(["figures", "--size", "ci"]) == 2
    assert "LONGCTX_DATA" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "gone"))
    assert main(["run", "00", "--size", "ci"]) == 2
    assert "a symbolic link that leads nowhere" in capsys.readouterr().err and not (tmp_path / "nowhere").exists()
    monkeypatch.delenv("LONGCTX_BUILD")
    from longctx import paths

    monkeypatch.setattr(paths, "REPO", tmp_path)  # the default build/ as a file: named as the default, not the variable
    (tmp_path / "build").write_text("mine")
    monkeypatch.setenv("LONGCTX_DATA", "")
    with pytest.raises(LongctxError, match=r"build \(the default; LONGCTX_BUILD moves it\) is not a folder"):
        paths.build_dir()


def test_names_the_library_gives_a_meaning_are_not_read_as_local_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("tiny", "base", "corpus"):
        (tmp_path / name).mkdir()
        assert harness._absolute(name) == name
    (tmp_path / "my-model").mkdir()
    assert harness._absolute("my-model") == str(tmp_path / "my-model")


def test_verifying_a_data_folder_that_is_not_there_creates_nothing(tmp_path, monkeypatch, capsys):
    from longctx.tools.cli import main

    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "elsewhere"))
    assert main(["data", "--verify"]) == 2
    assert "nothing to verify" in capsys.readouterr().err and not (tmp_path / "elsewhere").exists()


def test_the_rehearsal_names_the_command_that_builds_what_it_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path))
    with pytest.raises(LongctxError, match="longctx pretrain --out"):
        harness.size_params(harness.notebooks()["03_activation_offload"], "rehearsal")
    (tmp_path / "yarn-base").mkdir()  # the model there, the parquet copy of the corpus not
    with pytest.raises(LongctxError, match="`longctx data` builds it"):
        harness.size_params(harness.notebooks()["02_yarn"], "rehearsal")


def _write(tmp_path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def _folder(tmp_path, name: str) -> str:
    (tmp_path / name).mkdir()
    return str(tmp_path / name)


def _looping_config(tmp_path) -> str:
    (folder := tmp_path / "loop").mkdir(exist_ok=True)
    if not (folder / "config.json").is_symlink():
        (folder / "config.json").symlink_to("config.json")
    return str(folder)


def _dev_zero_config(tmp_path):
    (folder := tmp_path / "zero").mkdir()
    (folder / "config.json").symlink_to("/dev/zero")
    return str(folder)


def _data_folder_is_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGCTX_DATA", _write(tmp_path, "afile", "mine"))
    return ["data", "--verify"]


NAN_WIDTH = '{"model_type": "qwen3", "hidden_size": NaN, "num_hidden_layers": 2, "num_attention_heads": 4}'
NEGATIVE_DEPTH = '{"model_type": "qwen3", "hidden_size": 96, "num_hidden_layers": -3, "num_attention_heads": 4}'
WIDE = '{"model_type": "qwen3", "hidden_size": 1048576, "intermediate_size": 4194304, "num_attention_heads": 8}'
MAMBA_LAYERS = (  # transformers reads "mamba" as linear_attention, which Qwen3 has no layer for
    '{"model_type": "qwen3", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, '
    '"layer_types": ["mamba", "mamba"]}'
)
SLIDING_WITHOUT_WINDOW = (  # transformers' own mask code would raise deep in the traced step
    '{"model_type": "qwen3", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, '
    '"layer_types": ["sliding_attention", "full_attention"], "sliding_window": null}'
)


@pytest.mark.parametrize(
    "argv,fragment",
    [
        (lambda t, m: ["run", "00", "--size", "ci", "--out", str(t / "new\nline")], "holds '\\\\n': a line break"),
        (lambda t, m: ["estimate", "--model", _folder(t, "empty"), "--seq-len", "1k"], "has no config.json"),
        (lambda t, m: ["estimate", "--model", _looping_config(t), "--seq-len", "1k"], r"a link to nothing \(or a loop"),
        (lambda t, m: ["estimate", "--model", _looping_config(t) + "/config.json", "--seq-len", "1k"], "a loop of links"),
        (lambda t, m: ["estimate", "--model", _write(t, "list.json", "[1, 2]"), "--seq-len", "1k"], "holds a JSON list, not an"),
        (lambda t, m: ["estimate", "--model", _write(t, "wide.json", WIDE), "--seq-len", "1k"], "hidden_size is 1,048,576: over"),
        (
            lambda t, m: [
                "estimate",
                "--model",
                _write(t, "mm.json", '{"model_type": "qwen3", "text_config": {}}'),
                "--seq-len",
                "1k",
            ],
            "text_config is a plain set of settings: a qwen3 config is no multimodal one",
        ),
        (
            lambda t, m: ["estimate", "--model", _write(t, "mamba.json", MAMBA_LAYERS), "--seq-len", "1k"],
            "layer_types hold 'linear_attention' layers, which qwen3 does not build",
        ),
        (
            lambda t, m: ["estimate", "--model", _write(t, "sw.json", SLIDING_WITHOUT_WINDOW), "--seq-len", "1k"],
            "sliding-attention layers .* but no sliding_window",
        ),
        (lambda t, m: ["plan", "--model", "qwen3-8b", "--seq-len", "64", "--gpus", "64"], "use at most 32 ranks"),
        (
            lambda t, m: ["plan", "--model", "qwen3-8b", "--seq-len", "1M", "--gpus", "1048576"],
            "at most 64 GPUs; use --gpus 64 or fewer",
        ),
        (lambda t, m: ["estimate", "--model", _dev_zero_config(t), "--seq-len", "1k"], "config.json is not a regular file"),
        (
            lambda t, m: ["run", _write(t, "notes.ipynb", "my notes"), "--size", "ci", "--out", str(t / "out")],
            "is not a readable notebook",
        ),
        (lambda t, m: ["run", "00", "--size", "ci", "-p", "LORA_RANK=20000000"], "LORA_RANK=20000000 must be at most 1,024"),
        (_data_folder_is_a_file, "is a file, not a folder"),
        (
            lambda t, m: ["estimate", "--model", _write(t, "nan.json", NAN_WIDTH), "--seq-len", "1k"],
            "hidden_size is nan: not a positive whole number; fix config.json",
        ),
        (
            lambda t, m: ["estimate", "--model", _write(t, "minus.json", NEGATIVE_DEPTH), "--seq-len", "1k"],
            "num_hidden_layers is -3: not a positive whole number",
        ),
        (
            lambda t, m: [
                "estimate",
                "--model",
                _write(t, "fam.json", '{"model_type": "qwen4", "hidden_size": 96}'),
                "--seq-len",
                "2k",
            ],
            r"model_type 'qwen4' is no model family transformers .* \(did you mean 'qwen3'\?\)",
        ),
        (
            lambda t, m: ["run", "01", "--size", "ci", "-p", f"CPU_LENGTHS={list(range(64, 64 * (schema.MAX_ITEMS + 2), 64))}"],
            f"must hold at most {schema.MAX_ITEMS} values",
        ),
        (lambda t, m: ["run", "04", "--size", "ci", "-p", "OTHER_READING=qwen3\n-4b"], "a line break or other control"),
    ],
    ids=[
        "line-break-in-out",
        "model-folder-without-config",
        "model-folder-whose-config-loops",
        "config-file-that-loops",
        "config-that-is-a-list",
        "config-wider-than-any-model",
        "text-config-its-family-lacks",
        "layers-the-family-does-not-build",
        "sliding-layers-without-a-window",
        "more-cp-ranks-than-tokens",
        "more-cp-ranks-than-an-estimate-traces",
        "config-that-is-a-device",
        "text-file-named-ipynb",
        "lora-rank-past-its-range",
        "data-folder-that-is-a-file",
        "config-width-not-a-number",
        "config-depth-negative",
        "config-family-transformers-lacks",
        "list-of-more-values-than-a-lesson-takes",
        "model-name-with-a-control-character",
    ],
)
def test_inputs_no_command_can_use_are_told_plainly(tmp_path, monkeypatch, capsys, argv, fragment):
    from longctx.tools.cli import main

    assert main(argv(tmp_path, monkeypatch)) == 2
    err = capsys.readouterr().err
    assert re.search(fragment, err) and "Traceback" not in err, err
    assert not (tmp_path / "new\nline").exists() and not (tmp_path / "out").exists()
    assert not (tmp_path / "afile").exists() or (tmp_path / "afile").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.parametrize(
    "cell,what",
    [
        ("os.kill(os.getpid(), signal.SIGSTOP)", "(stopped). A stopped process waits for a SIGCONT"),
        ("subprocess.Popen(['sleep', '600'], start_new_session=True)\ntime.sleep(600)", "sleep (sleeping)"),
    ],
    ids=["stopped-kernel", "waiting-kernel-and-its-child"],
)
def test_a_stuck_kernel_is_stopped_at_its_limit_with_everything_it_started(tmp_path, cell, what):
    import time

    import nbformat
    import psutil

    original = nbformat.read(harness.notebooks()["00_memory_primer"], as_version=4)
    params = next(c for c in original.cells if "parameters" in c.metadata.get("tags", []))
    stuck = nbformat.v4.new_code_cell(f"import os, signal, subprocess, time\n{cell}")
    mine = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_markdown_cell("x"), stuck], metadata=original.metadata)
    path = tmp_path / "copy" / "00_memory_primer.ipynb"
    path.parent.mkdir()
    nbformat.write(mine, path)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    start = time.monotonic()
    with pytest.raises(harness.NotebookFailed) as err:
        harness.run(str(path), "ci", out=tmp_path / "out", progress=False, timeout=0.25)
    assert time.monotonic() - start < 0.25 * 60 + 60  # ended at its limit, not at nbclient's or the test run's
    assert err.value.ename == harness.TIMED_OUT
    message = str(err.value)
    assert "timed out in cell 3 (`import os, signal, subprocess, time`)" in message  # papermill injects one cell
    assert "limit of 0.25 min (--timeout)" in message and what in message and "the kernel (" in message
    time.sleep(1)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    assert left == []
    # p.info: None for a process gone or a zombie meanwhile (another test's, on the other worker)
    commands = [p.info["cmdline"] or [] for p in psutil.process_iter(["cmdline"])]
    assert not any("sleep" in " ".join(cmd) and cmd[-1] == "600" for cmd in commands)


def test_a_limit_reached_before_the_kernel_starts_stops_the_kernel_all_the_same():
    """A limit shorter than the kernel's start (`--timeout 1e-9`) once fired with nothing to stop, and the run went on."""
    import subprocess
    import time

    from longctx import children

    with children.Deadline(1e-9) as deadline:
        time.sleep(0.1)  # fired: nothing was started yet
        late = subprocess.Popen(["sleep", "600"])
        assert late.wait(timeout=5) == -9  # started past the limit: stopped too
    assert deadline.fired
    after = subprocess.Popen(["sleep", "1"])  # once the block ends, the limit no longer applies
    assert after.wait(timeout=5) == 0


def test_time_limits_come_from_the_declared_minutes_and_bad_ones_are_refused(capsys):
    from longctx.run import needs
    from longctx.tools import cli

    minutes, how = harness.time_limit("04_context_parallelism", "ci")
    assert minutes == needs.LIMIT_FACTOR * needs.of("04_context_parallelism", "ci").minutes + needs.LIMIT_SLACK
    assert "needs.yaml declares" in how and harness.time_limit("04_context_parallelism", "ci", 3) == (3, "--timeout")
    for bad in ("0", "-1", "nan", "inf"):
        assert cli.main(["run", "00", "--size", "ci", "--timeout", bad]) == 2
        assert "--timeout must be a positive number of minutes" in capsys.readouterr().err


def test_a_session_records_the_declared_parameters_only(tmp_path, monkeypatch):
    from longctx import notebook

    monkeypatch.setenv("LONGCTX_OUT", str(tmp_path))
    # the first cell run again in JupyterLab after later ones: their UPPER_CASE names are globals too
    namespace = {"MODEL": "tiny", "SEQ_LEN": 256, "DEVICE": "cpu", "MY_MODEL": "mine", "P": 3, "lower": 1}
    session = notebook.start("00_memory_primer", notebook.parameters(namespace))
    assert session.params == {"MODEL": "tiny", "SEQ_LEN": 256}


def test_results_json_is_json_whatever_a_lesson_records(tmp_path):
    import json
    import math

    import numpy as np

    from longctx.notebook import Session

    session = Session("00_memory_primer", {}, tmp_path)
    session.record(seconds=math.inf, ratio=np.float64("nan"), rows=np.array([1.0, np.inf]), fine=2.5)
    session.save()
    results = json.loads((tmp_path / "results.json").read_text(), parse_constant=lambda c: pytest.fail(c))["results"]
    assert results == {"seconds": None, "ratio": None, "rows": [1.0, None], "fine": 2.5}


def test_a_second_run_into_a_folder_in_use_is_refused(tmp_path):
    from filelock import FileLock

    from longctx import files

    out = tmp_path / "out"
    files.claim_folder(out, "run")
    (out / "figures").mkdir()
    (out / "figures" / "old.png").write_bytes(b"an earlier run's")
    with FileLock(out / ".lock"):  # as the first run holds it
        with pytest.raises(LongctxError, match="Another run is writing into"):
            harness.run("00", "ci", out=out, progress=False)
    assert (out / "figures" / "old.png").exists()  # the refused run touched nothing


def test_a_config_nested_past_any_reader_is_refused_by_name(tmp_path):
    from longctx import models

    deep = tmp_path / "config.json"
    deep.write_text('{"a":' * 200_000 + "1" + "}" * 200_000)
    with pytest.raises(LongctxError, match="nested too deeply to read"):
        models.config(str(deep))


def test_a_run_into_another_notebooks_folder_is_refused_before_it_touches_it(tmp_path):
    from longctx import files

    out = tmp_path / "out"
    files.claim_folder(out, "run")
    for name in ("06_one_million_tokens.ipynb", "results.json"):
        (out / name).write_text("{}")
    with pytest.raises(LongctxError, match="holds another notebook's run \\(06_one_million_tokens.ipynb\\)"):
        harness.run("00", "ci", out=out, progress=False)
    assert (out / "results.json").read_text() == "{}"


@pytest.mark.parametrize(
    "options,fragment",
    [
        (dict(init=""), "--init is empty"),
        (dict(retrieval=1.0, seq_len=16), "--retrieval needs --seq-len 38 or more"),
    ],
)
def test_pretrain_refuses_an_empty_init_and_a_pass_key_longer_than_its_window(tmp_path, options, fragment):
    from longctx.levers import base_model

    with pytest.raises(LongctxError, match=fragment):
        base_model.pretrain(tmp_path / "m", steps=1, **options)
    assert not (tmp_path / "m").exists()


def test_a_damaged_manifest_and_a_file_config_with_auto_map_are_refused(tmp_path):
    import json

    from longctx import models
    from longctx.levers import base_model

    (tmp_path / "manifest.json").write_text("[1]")
    with pytest.raises(LongctxError, match="manifest.json is damaged"):
        base_model.manifest(tmp_path)
    config = json.loads((base_model.checkpoint_dir() / "config.json").read_text())
    (tmp_path / "mine.json").write_text(json.dumps(config | {"auto_map": {"AutoConfig": "mine.Config"}}))
    with pytest.raises(LongctxError, match="needs its own Python code"):
        models.config(str(tmp_path / "mine.json"))


def test_pretrain_checks_the_room_for_its_model_before_training(tmp_path, monkeypatch, capsys):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 0, 10**5))  # 0.1 MB free
    assert main(["pretrain", "--out", str(tmp_path / "new"), "--steps", "1"]) == 2
    assert "MiB free; the trained model, its tokenizer and records are written" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_run_stopped_before_its_notebook_is_in_place_leaves_no_results(tmp_path):
    results = tmp_path / "results.json"
    with pytest.raises(KeyboardInterrupt), harness._dropped_unless_done(results):
        results.write_text("{}")  # the kernel's last cell saved, then Ctrl-C came before the notebook was written
        raise KeyboardInterrupt
    assert not results.exists()
    with harness._dropped_unless_done(results):  # a run that ends keeps it
        results.write_text("{}")
    assert results.exists()


def test_a_length_past_the_machines_memory_is_refused_before_the_kernel(tmp_path, capsys, monkeypatch):
    import psutil

    from longctx.memory.estimate import estimate

    notebook = harness.resolve("01")
    ci = harness.size_params(notebook, "ci")["SEQ_LEN"]
    model = harness.declared_parameters(notebook)["MODEL"]
    need = estimate(model, 4 * ci, loss="plain", dtype="fp32", device="cpu").peak_bytes
    memory = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=need - 1))
    with pytest.raises(LongctxError, match=rf"SEQ_LEN={4 * ci:,} is more than this machine can step: .* GiB is available"):
        harness.run("01", "ci", {"SEQ_LEN": 4 * ci}, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()  # refused before its folder or a kernel
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=need))
    harness.checked_run(notebook, "ci", {"SEQ_LEN": 4 * ci})  # it fits: the run is told its time limit stays the size's
    assert f"SEQ_LEN={4 * ci:,} is 4× the ci size's tokens a step; it may run past" in capsys.readouterr().err
    harness.checked_run(notebook, "ci", {"SEQ_LEN": ci})  # the size's own length: nothing to check, nothing said
    assert capsys.readouterr().err == ""
    # the batch counts (lesson 00's step is BATCH sequences of SEQ_LEN), and every length the schema marks so (a
    # lesson's second model's step included)
    primer = harness.resolve("00")
    sized = {**harness.declared_parameters(primer), **harness.size_params(primer, "ci")}
    need = estimate(
        sized["MODEL"], sized["SEQ_LEN"], batch=64 * sized["BATCH"], loss="plain", checkpointing=False, dtype="fp32", device="cpu"
    )  # lesson 00 measures its step without checkpointing, as its schema says
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=need.peak_bytes - 1))
    with pytest.raises(LongctxError, match=f"BATCH={64 * sized['BATCH']:,} is more than this machine can step"):
        harness.checked_run(primer, "ci", {"BATCH": 64 * sized["BATCH"], "TRAIN_SEQS": 64 * sized["BATCH"]})
    bigger = estimate(
        "qwen3-0.6b", sized["SEQ_LEN"], batch=sized["BATCH"], loss="plain", checkpointing=False, dtype="fp32", device="cpu"
    )
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=bigger.peak_bytes - 1))
    with pytest.raises(LongctxError, match="MODEL=qwen3-0.6b is more than this machine can step"):  # another model
        harness.checked_run(primer, "ci", {"MODEL": "qwen3-0.6b"})
    declared = harness.declared_parameters(notebook)
    longer = 4 * {**declared, **harness.size_params(notebook, "ci")}["CHECK_LEN"]
    check = estimate(declared["CHECK_MODEL"], longer, loss="plain", dtype="fp32", device="cpu")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=check.peak_bytes - 1))
    with pytest.raises(LongctxError, match=f"CHECK_LEN={longer:,} is more than this machine can step"):
        harness.checked_run(notebook, "ci", {"CHECK_LEN": longer})


def test_a_derived_length_a_probe_and_a_widened_model_are_estimated_too(monkeypatch, capsys):
    """Lesson 02 fine-tunes at MULTIPLE × the miniature's trained length and its probe at its longest length; lesson 07
    widens its preset's MLP: each step is estimated as the lesson would take it."""
    import psutil

    from longctx import models
    from longctx.levers.base_model import trained_length
    from longctx.memory.estimate import estimate

    memory = psutil.virtual_memory()

    def refused_at(need, notebook, values, match):
        monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=need.peak_bytes - 1))
        with pytest.raises(LongctxError, match=match):
            harness.checked_run(harness.resolve(notebook), "ci", values)
        monkeypatch.setattr(psutil, "virtual_memory", lambda: memory._replace(available=need.peak_bytes))
        harness.checked_run(harness.resolve(notebook), "ci", values)  # the step fits: the run goes on, told so

    yarn = {**harness.declared_parameters(harness.resolve("02")), **harness.size_params(harness.resolve("02"), "ci")}
    wanted = 64 * trained_length(harness.miniature("base"))
    need = estimate(str(harness.miniature("base")), wanted, batch=yarn["FT_WINDOWS"], loss="plain", dtype="fp32", device="cpu")
    refused_at(need, "02", {"MULTIPLE": 64}, rf"MULTIPLE=64 .* on {yarn['FT_WINDOWS']} × {wanted:,} tokens")
    probe = estimate(
        str(harness.miniature("retrieval")), 8192, batch=yarn["PROBE_FT_BATCH"], loss="plain", dtype="fp32", device="cpu"
    )
    refused_at(probe, "02", {"PROBE_LENGTHS": [96, 8192]}, r"PROBE_LENGTHS=\[96, 8192\] is more than this machine can step")
    tiled = {**harness.declared_parameters(harness.resolve("07")), **harness.size_params(harness.resolve("07"), "ci")}
    wide = models.config(tiled["MODEL"], intermediate_size=65536)
    need = estimate(
        wide, max(tiled["CPU_LENGTHS"] + [tiled["SEQ_LEN"], tiled["ATTN_LEN"]]), loss="plain", dtype="fp32", device="cpu"
    )
    refused_at(need, "07", {"MLP_WIDTH": 65536}, "MLP_WIDTH=65,536 is more than this machine can step")
    assert capsys.readouterr().err.count("MLP_WIDTH=65,536 is another model") == 1  # three lengths, one model: said once
    primer = {**harness.declared_parameters(harness.resolve("00")), **harness.size_params(harness.resolve("00"), "ci")}
    every = 8 * primer["ACCUM_MICRO_BATCH"] * primer["ACCUM_STEPS"]  # the accumulation check's one step of them all
    need = estimate(
        primer["MODEL"], primer["SEQ_LEN"], batch=every, loss="plain", checkpointing=False, dtype="fp32", device="cpu"
    )
    values = {"ACCUM_MICRO_BATCH": 8 * primer["ACCUM_MICRO_BATCH"], "TRAIN_SEQS": every}
    refused_at(need, "00", values, rf"ACCUM_MICRO_BATCH={8 * primer['ACCUM_MICRO_BATCH']} .*\(checkpointing off\) on {every} ×")


def test_a_loss_head_cut_into_too_many_tiles_is_refused_with_the_tile_that_fits(tmp_path):
    """Each fused-head tile is a turn of TRL's Python loop: a tile of 3 vocabulary columns ran lesson 01 at the ci size
    into its 6-minute limit. The step's tile count is refused before the kernel, naming a tile size that fits."""
    from longctx import models

    notebook = harness.resolve("03")
    sized = {**harness.declared_parameters(notebook), **harness.size_params(notebook, "ci")}
    tokens, vocab = max(sized["CPU_LENGTHS"] + [sized["SEQ_LEN"]]), models.config(sized["MODEL"]).vocab_size
    with pytest.raises(LongctxError, match=r"TILE_TOKENS=1 and TILE_VOCAB=.* raise TILE_TOKENS to at least (\d+)\.") as err:
        harness.run("03", "ci", {"TILE_TOKENS": 1}, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    fits = int(re.search(r"at least (\d+)", str(err.value))[1])
    assert -(-tokens // fits) * -(-vocab // sized["TILE_VOCAB"]) <= harness.MAX_TILES  # the size it names fits
    assert -(-tokens // (fits - 1)) * -(-vocab // sized["TILE_VOCAB"]) > harness.MAX_TILES  # and is the least that does
    harness.checked_run(notebook, "ci", {"TILE_TOKENS": fits})
    with pytest.raises(LongctxError, match="raise TILE_VOCAB to at least"):  # a step of many rows: the columns fit it
        harness.checked_run(notebook, "ci", {"TILE_TOKENS": 2, "TILE_VOCAB": 2})
    for size in ("ci", "cpu", "rehearsal"):  # the sizes' own tiles are within the bound
        for name in ("01", "03", "07"):
            harness.checked_run(harness.resolve(name), size)


def test_a_value_starting_with_a_dash_is_shown_joined_to_its_flag(capsys):
    with pytest.raises(SystemExit):  # argparse reads `-4k` as a flag of its own
        main(["estimate", "--model", "tiny", "--seq-len", "-4k"])
    assert (
        "expected one argument (a value that starts with '-' is joined to its flag: --seq-len=VALUE)" in capsys.readouterr().err
    )
    assert main(["estimate", "--model", "tiny", "--seq-len=-4k"]) == 2  # then the length's own check speaks
    assert "Sequence length '-4k' is not a positive integer" in capsys.readouterr().err


def test_a_fifo_where_a_notebook_or_a_config_is_read_is_refused_not_waited_on(tmp_path):
    import os

    from longctx import models

    os.mkfifo(tmp_path / "lesson.ipynb")  # reading it would wait for a writer for ever
    with pytest.raises(LongctxError, match="lesson.ipynb is not a regular file"):
        harness.resolve(str(tmp_path / "lesson.ipynb"))
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "config.json")
    with pytest.raises(LongctxError, match="config.json is not a regular file"):
        models.check_spec(str(tmp_path / "model"))


def test_a_local_folder_named_like_a_hub_id_is_said_to_be_the_folder(tmp_path, monkeypatch, capsys):
    from longctx import models

    monkeypatch.chdir(tmp_path)
    (tmp_path / "Qwen" / "Qwen3-4B").mkdir(parents=True)  # transformers reads the local folder, not the hub's model
    models.config("tiny").save_pretrained(tmp_path / "Qwen" / "Qwen3-4B")
    assert main(["estimate", "--model", "Qwen/Qwen3-4B", "--seq-len", "1k"]) == 0
    assert f"note: Qwen/Qwen3-4B is the folder {tmp_path / 'Qwen' / 'Qwen3-4B'} here" in capsys.readouterr().err


def test_a_diverged_pretrain_says_what_went_wrong_and_writes_nothing(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from longctx import train
    from longctx.levers import base_model

    monkeypatch.setattr(train, "run_sft", lambda *a, **k: SimpleNamespace(losses=[8.3, 0.0], seconds=1.0))
    with pytest.raises(LongctxError, match=r"Training diverged \(logged losses \[8.3, 0.0\]…: a loss logged as 0.0 is a NaN"):
        base_model.pretrain(tmp_path / "out", steps=2, batch=2, seq_len=32, warmup_steps=0, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_malformed_hugging_face_variable_is_named_not_a_traceback():
    import os
    import subprocess
    import sys

    env = {**os.environ, "HF_HUB_DOWNLOAD_TIMEOUT": "ten"}  # huggingface_hub reads it as an int when imported
    done = subprocess.run([sys.executable, "-m", "longctx", "list"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "A Hugging Face setting in the environment is malformed" in done.stderr and "HF_*" in done.stderr


@pytest.mark.parametrize("name", ["results.json", ".lock", "00_memory_primer.ipynb", "figures"])
def test_a_name_the_run_writes_standing_there_as_another_kind_is_refused_before_the_kernel(tmp_path, name):
    """In a folder the run wrote before, a folder where it writes a file (or a file where it writes its figures/)
    ended in a raw IsADirectoryError, or failed in the kernel after the earlier results were deleted."""
    from longctx import files

    out = files.claim_folder(tmp_path / "out", "run")
    (out / "results.json").write_text("{}")  # the earlier run's
    if name == "figures":
        (out / name).write_text("the user's")
    else:
        (out / name).unlink(missing_ok=True)
        (out / name).mkdir()
        (out / name / "mine.txt").write_text("the user's")
    kind = "folder" if name == "figures" else "file"
    with pytest.raises(LongctxError, match=rf"{re.escape(name)} should be a {kind} that `longctx run` writes; move it away"):
        harness.run("00", "ci", out=out)
    assert (out / "results.json").exists() or name == "results.json"  # nothing removed


def test_a_step_far_past_the_sizes_tokens_is_run_only_when_given_the_time(tmp_path, capsys):
    """A CPU's time is not estimated: a step RAISED_UNTIMED times the size's tokens is refused unless --timeout gives
    it the time (lesson 02 at MULTIPLE=1024 ran 5 minutes into a 6-minute limit, told only that it might)."""
    notebook = harness.resolve("02")
    raised = {**harness.declared_parameters(notebook), **harness.size_params(notebook, "ci")}["MULTIPLE"]
    raised *= harness.RAISED_UNTIMED + 1
    limit = needs.of("02_yarn", "ci").limit_minutes
    with pytest.raises(
        LongctxError, match=rf"MULTIPLE={raised:,} is [\d.]+× the ci size's tokens a step: far past what its {limit:g}-minute"
    ):
        harness.run("02", "ci", {"MULTIPLE": raised}, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    harness.checked_run(notebook, "ci", {"MULTIPLE": raised}, timeout=4 * limit)  # given the time, it is told the risk
    assert f"MULTIPLE={raised:,} is " in capsys.readouterr().err


def test_leading_zeros_are_no_size_and_a_card_past_any_device_is_refused(tmp_path):
    """Round 11: `SEQ_LEN=000…064` (34 characters) was refused as too large a number; `--gpu 1e308` printed float noise
    as a fit; a config.json that is a link loop was called an unknown model."""
    from longctx import models
    from longctx.memory import cards

    assert harness.parse_value("0" * 32 + "64") == 64
    with pytest.raises(LongctxError, match=r"\(31 digits\) as a number"):
        harness.parse_value("0" * 5 + "1" * 31)
    with pytest.raises(LongctxError, match=f"GPU memory must be a positive number of GiB up to {cards.MAX_GIB:,}"):
        cards.capacity("1e308")
    assert cards.capacity(str(cards.MAX_GIB))[0] == cards.MAX_GIB
    (tmp_path / "config.json").symlink_to("config.json")
    with pytest.raises(LongctxError, match="config.json is a link to nothing \\(or a loop of links\\)"):
        models.check_spec(str(tmp_path))
