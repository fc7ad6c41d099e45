"""The code passes ruff (pycodestyle, pyflakes, import order; the rules are in pyproject.toml)."""

import subprocess
import sys

from longctx.paths import REPO


def test_the_code_passes_ruff():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "helpers", "tests", "benchmarks", "scripts"], cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
