import json
import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported, here and in every kernel a test starts
    # `make test` runs two workers on two cores: one thread each (two workers of two torch threads each doubled the
    # CPU time, their OpenMP threads spinning while they wait)
    os.environ["OMP_NUM_THREADS"] = "1"

# tests that run notebooks through these fixtures are `slow` (the `make test-fast` tier leaves them out)
SLOW_FIXTURES = {"executed", "killed_then_resumed"}


# `make test` spreads the tests over two workers (pytest-xdist, `--dist loadfile`: a module stays on one worker, so its
# module fixtures are built once); the longest modules are sent first. (`--dist loadgroup` with `xdist_group` marks
# would group across modules, but xdist 3.8 under pytest 9.2 does not apply the marks: tried on a two-module toy.)
FIRST = ["test_notebooks", "test_rehearsal", "test_sweep", "test_estimate"]


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {module: i for i, module in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rpartition(".")[2], len(FIRST)))  # stable


# Tests never write into the repository's build/: each session gets its own.
@pytest.fixture(scope="session", autouse=True)
def _isolated_build(tmp_path_factory):
    os.environ["LONGCTX_BUILD"] = str(tmp_path_factory.mktemp("build"))
    yield


@pytest.fixture(scope="session")
def executed(tmp_path_factory, worker_id):
    """`executed(name, size)`: the notebook run once per test session at that size (the harness's RunResult), shared
    by the xdist workers through their common temporary folder and a lock (pytest-xdist's recipe for a session fixture
    run once): test_gpu_check reads the ci runs test_notebooks makes, whichever worker comes first."""
    from filelock import FileLock

    from longctx.run import harness

    root = tmp_path_factory.getbasetemp()
    shared = root if worker_id == "master" else root.parent

    def run(name, size):
        out = shared / f"executed-{name}-{size}"
        record = out.with_name(out.name + ".json")
        with FileLock(f"{out}.lock"):
            if not record.exists():
                result = harness.run(name, size, out=out, progress=False)
                record.write_text(json.dumps(result._asdict(), default=str))
        fields = json.loads(record.read_text())
        return harness.RunResult(**fields | {"out": Path(fields["out"]), "executed": Path(fields["executed"])})

    return run
