"""The GPU validation command rehearsed without a GPU: its dry run builds every step it would run (on fake
tensors) and checks every input; without a GPU the real run refuses with a clear message."""

import importlib.util
import json
import subprocess
import sys

import pytest

from longctx.paths import REPO


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_dry_run_builds_every_step_and_checks_every_input(tmp_path):
    gpu_check = _gpu_check()
    assert gpu_check.main(["--dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    built = {(b["model"], b["loss"], b["offload"]) for b in report["built"]}
    assert built == {(m, loss, off) for m, _, loss, off in gpu_check.CASES}
    assert all(b["fake_peak_gib_at_1024"] > 0 for b in report["built"])
    assert report["checked"]["notebooks"] == list(gpu_check.NOTEBOOKS)
    assert (tmp_path / "qwen3-0.6b-random" / "config.json").exists()
    assert "Dry run" in (tmp_path / "gpu_check.md").read_text()


def test_without_a_gpu_the_real_run_refuses(tmp_path):
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stderr and "--dry-run" in out.stderr
    assert "Traceback" not in out.stderr
