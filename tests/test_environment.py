import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    test = {d for d in extras["test"] if not d.startswith("longctx[")}
    test |= {d for ref in extras["test"] if ref.startswith("longctx[") for d in extras[ref[8:-1]]}  # longctx[site]
    wanted = set(project["dependencies"]) | test
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert set(pip) - {"-e ."} == wanted
    assert "python=3.11" in env["dependencies"]


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()
    assert "make test" in (REPO / "README.md").read_text()
