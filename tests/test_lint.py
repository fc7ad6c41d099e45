"""The code passes ruff: the lint rules (pycodestyle, pyflakes, import order) and the formatter, both configured in
pyproject.toml. `ruff format helpers tests benchmarks scripts notebooks` fixes what the second test finds."""

import subprocess
import sys

from longctx.paths import REPO

CODE = ["helpers", "tests", "benchmarks", "scripts", "notebooks"]  # ruff reads the notebooks' code cells too


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args, *CODE], cwd=REPO, capture_output=True, text=True)


def test_the_code_passes_ruff():
    out = _ruff("check")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_code_is_formatted_by_ruff():
    out = _ruff("format", "--check")
    assert out.returncode == 0, out.stdout + out.stderr
