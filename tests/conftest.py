import os

import pytest

# Tests never write into the repository's build/: each session gets its own.
@pytest.fixture(scope="session", autouse=True)
def _isolated_build(tmp_path_factory):
    os.environ["LONGCTX_BUILD"] = str(tmp_path_factory.mktemp("build"))
    yield
