import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported, here and in every kernel a test starts
    # `make test` runs two workers on two cores: one thread each (two workers of two torch threads each doubled the
    # CPU time, their OpenMP threads spinning while they wait)
    os.environ["OMP_NUM_THREADS"] = "1"

# tests that run notebooks through these fixtures are `slow` (the `make test-fast` tier leaves them out)
SLOW_FIXTURES = {"executed", "killed_then_resumed"}


# `make test` spreads the tests over two workers (pytest-xdist, `--dist loadgroup`). The groups below ask for each
# module as one unit (its module fixtures built once) and one unit for the modules that read every notebook's `ci`
# run. Known gap: xdist 3.8 under pytest 9.2 does not apply `xdist_group` here, not even a module's static
# `pytestmark` (tried in a two-module toy: the group's tests went to both workers; `--dist loadfile` kept each module
# on one). So the tests are spread one by one, and test_sweep's module fixture is built on both workers.
SHARED_GROUPS = {"test_notebooks": "ci-runs", "test_site": "ci-runs"}
FIRST = ["ci-runs", "test_rehearsal", "test_sweep", "test_estimate"]


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        module = item.module.__name__.rpartition(".")[2]
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(module, module)))
    rank = {group: i for i, group in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.get_closest_marker("xdist_group").args[0], len(FIRST)))  # stable


# Tests never write into the repository's build/: each session gets its own.
@pytest.fixture(scope="session", autouse=True)
def _isolated_build(tmp_path_factory):
    os.environ["LONGCTX_BUILD"] = str(tmp_path_factory.mktemp("build"))
    yield


@pytest.fixture(scope="session")
def executed(tmp_path_factory):
    """`executed(name, size)`: the notebook run once per session at that size (the harness's RunResult)."""
    from longctx.run import harness

    cache = {}

    def run(name, size):
        if (name, size) not in cache:
            cache[name, size] = harness.run(name, size, out=tmp_path_factory.mktemp(f"{name}-{size}"), progress=False)
        return cache[name, size]

    return run
