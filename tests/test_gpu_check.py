"""The GPU validation command rehearsed without a GPU: its dry run builds every step it would run (on fake
tensors) and checks every input; without a GPU the real phases refuse with a clear message; its reports are
written whole after every case and only they go to the folder that is sent back; the wheels it carries to a
machine without a package index are the computed closure of what that machine lacks."""

import importlib.util
import json

import pytest

from longctx.paths import REPO


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_builds_every_step_and_checks_every_input(tmp_path):
    gpu_check = _load("gpu_check")
    sent = tmp_path / "sent"
    assert gpu_check.main(["dry-run", "--out", str(tmp_path / "out"), "--report-to", str(sent)]) == 0
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["dry-run"]
    built = {(b["model"], b["loss"], b["offload"]) for b in report["built"]}
    assert built == {(m, loss, off) for m, _, loss, off in gpu_check.CASES} and report["finished"]
    assert all(b["fake_peak_gib_at_1024"] > 0 for b in report["built"])
    timed = {(t["model"], json.dumps(t["levers"], sort_keys=True)) for t in report["timed"]}  # (e)'s steps, priced
    assert timed == {(m, json.dumps(lv, sort_keys=True)) for m, _, lv in gpu_check.TIME_CASES}
    assert all(t["predicted_seconds_at_1024"] > 0 for t in report["timed"])
    assert report["checked"]["notebooks"] == list(gpu_check.NOTEBOOKS)
    assert (tmp_path / "out" / "qwen3-0.6b-random" / "config.json").exists()
    assert "dry-run — finished" in (sent / "gpu_check.md").read_text()
    assert sorted(p.name for p in sent.iterdir()) == ["gpu_check.json", "gpu_check.md"]  # the model stays behind


def test_without_a_gpu_the_real_phases_refuse(tmp_path, capsys):
    gpu_check = _load("gpu_check")
    for phase in ("measure", "notebooks", "time"):
        assert gpu_check.main([phase, "--out", str(tmp_path)]) == 2 and "dry-run" in capsys.readouterr().err
    assert not (tmp_path / "gpu_check.json").exists()


def test_a_phase_stopped_half_way_has_already_reported_what_it_measured(tmp_path):
    gpu_check = _load("gpu_check")
    (tmp_path / "01_chunked_loss").mkdir()
    (tmp_path / "01_chunked_loss" / "results.json").write_text('{"results": {}}')
    report = gpu_check.Report(tmp_path, "measure", tmp_path / "sent", "python benchmarks/gpu_check.py measure")
    report.section["estimates"] = [{"model": "qwen3-0.6b", "seq_len": 8192, "loss": "chunked", "offload": False, "error": "boom"}]
    report.save()  # what each case does before the next starts; nothing runs after it here
    md = (tmp_path / "sent" / "gpu_check.md").read_text()
    assert "measure — NOT finished" in md and "| qwen3-0.6b | 8,192 | chunked | False | — | — | — | boom |" in md
    sent = sorted(p.name for p in (tmp_path / "sent").iterdir())
    assert sent == ["01_chunked_loss.results.json", "gpu_check.json", "gpu_check.md"]


def test_the_wheels_carried_are_the_closure_of_what_the_machine_lacks():
    wheels = _load("gpu_wheels")
    image = wheels.image_packages()
    walk = wheels.closure(image)
    carry = walk["carry"]
    assert "torch" not in carry and "accelerate" not in carry  # the image's torch; its accelerate 1.15.0 is ours
    assert {"trl", "transformers", "peft", "datasets", "papermill", "ipykernel", "nbclient"} <= set(carry)
    assert carry["transformers"] == "5.24.0"  # the image's 5.17.0 is shadowed, not used
    # what a hand-written list missed before, found by walking Requires-Dist
    missed = {"dill", "multiprocess", "platformdirs", "fastjsonschema", "jsonschema", "jsonschema-specifications"}
    missed |= {"referencing", "rpds-py", "tenacity", "matplotlib-inline", "stack-data", "executing", "asttokens", "pure-eval"}
    assert missed <= set(carry)
    assert not set(carry) & {n for n, v in image.items() if n in walk["image"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["00_memory_primer", "01_chunked_loss", "03_activation_offload"])
def test_the_report_quotes_results_each_notebook_writes(executed, name):
    """Each key the GPU report quotes is one the notebook records (at the ci size; the gpu size runs the same
    cells), so a renamed result shows up here and not as a column of dashes on a lent GPU."""
    gpu_check = _load("gpu_check")
    results = executed(name, "ci").results["results"]
    # (a value recorded only on a GPU, such as 03's timed steps, is held by the key it is recorded under)
    missing = [k for k in gpu_check.KEY_RESULTS[name] if gpu_check._dotted(results, k.split(".")[0]) is None]
    assert not missing and set(gpu_check.KEY_RESULTS) == {"00_memory_primer", "01_chunked_loss", "03_activation_offload"}
