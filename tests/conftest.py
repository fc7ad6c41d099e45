import os

import pytest

# tests that run notebooks through these fixtures are `slow` (the `make test-fast` tier leaves them out)
SLOW_FIXTURES = {"executed", "killed_then_resumed"}


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


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
