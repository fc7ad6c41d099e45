import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # before torch is imported, here and in every kernel a test starts
    # `make test` runs two workers on two cores: one thread each (two workers of two torch threads each doubled the
    # CPU time, their OpenMP threads spinning while they wait)
    os.environ["OMP_NUM_THREADS"] = "1"

SYNTHETIC = Path(__file__).parent / "lessons"  # a three-cell lesson: the harness, sweeps and the site are tested on it
# tests that run notebooks through these fixtures are `slow` (the `make test-fast` tier leaves them out)
SLOW_FIXTURES = {"executed", "killed_then_resumed"}
# Each lesson runs once per suite, at `ci` (the gpu size's code paths, the lesson's claims). They start as the session
# does, in one background process per worker, the longest first and shared out so that the two workers end together
# (seconds on two busy cores, from `pytest --durations`); a test that needs a lesson not run yet waits for it, or runs it.
LESSON_SECONDS = {
    "04_context_parallelism": 160, "05_trainium_padding": 140, "10_context_extension": 120, "02_yarn": 70,
    "01_chunked_loss": 60, "07_tiled_mlp": 50, "03_activation_offload": 45, "00_memory_primer": 45, "09_host_state": 45,
    "08_packing": 30, "06_one_million_tokens": 25,
}  # fmt: skip


@contextlib.contextmanager
def refused(*named: str, kind: type = None):
    """The block is refused (a LongctxError, or `kind`) and what it says names each of `named`: the parameter, flag,
    path or value to change, never a sentence of the message."""
    from longctx import LongctxError

    with pytest.raises(kind or LongctxError) as err:
        yield err
    assert all(n in str(err.value) for n in named), (named, str(err.value))


def small_config(folder: Path, family: str = "Llama", **changes) -> str:
    """A two-layer config.json of a transformers family (`family`Config) written into `folder`; its path."""
    import transformers

    sizes = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)  # fmt: skip
    getattr(transformers, f"{family}Config")(**sizes | changes).save_pretrained(folder)
    return str(Path(folder) / "config.json")


def _shared(config) -> Path:
    """A folder every worker of this session sees: the lessons' runs and their records."""
    root = Path(config._tmp_path_factory.getbasetemp())  # (pytest's own, made at configure time)
    return root if not os.environ.get("PYTEST_XDIST_WORKER") else root.parent


def pytest_collection_modifyitems(items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session):
    """Start this worker's share of the lessons, when a collected test reads one."""
    if session.config.option.collectonly or not any("executed" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    me = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    loads, mine = [0] * workers, []
    for name, seconds in LESSON_SECONDS.items():  # longest first, each to the worker with the least so far
        least = loads.index(min(loads))
        loads[least] += seconds
        if least == me:
            mine.append(name)
    shared = _shared(session.config)
    env = dict(os.environ, LONGCTX_BUILD=str(shared / "build"))
    runner = subprocess.Popen([sys.executable, __file__, str(shared), *mine], env=env, start_new_session=True)
    session.config._lesson_runner = runner


def pytest_sessionfinish(session):
    runner = getattr(session.config, "_lesson_runner", None)
    if runner is not None and runner.poll() is None:  # a session stopped early: its lessons are not needed
        from longctx import children

        children.stop_tree(runner)


def run_once(shared: Path, name: str, size: str = "ci") -> dict:
    """The lesson run once into `shared` (a lock per lesson: whoever comes first runs it, the others wait); its record."""
    from filelock import FileLock

    from longctx.run import harness

    out = shared / f"executed-{name}-{size}"
    record = out.with_name(out.name + ".json")
    with FileLock(f"{out}.lock"):
        if not record.exists():
            result = harness.run(name, size, out=out, progress=False)
            record.write_text(json.dumps(result._asdict(), default=str))
    return json.loads(record.read_text())


@pytest.fixture(scope="session", autouse=True)
def _isolated_build(tmp_path_factory):
    """Tests never write into the repository's build/: each session gets its own."""
    os.environ["LONGCTX_BUILD"] = str(tmp_path_factory.getbasetemp() / "build")
    yield


@pytest.fixture(scope="session")
def executed(request):
    """`executed(name)`: the lesson's one run at `ci` this session (the harness's RunResult)."""
    from longctx.run import harness

    shared = _shared(request.config)

    def run(name, size="ci"):
        fields = run_once(shared, name, size)
        return harness.RunResult(**fields | {"out": Path(fields["out"]), "executed": Path(fields["executed"])})

    return run


@pytest.fixture
def hub_cache(monkeypatch, tmp_path):
    """The hub client's cache in `tmp_path` and the network out of reach (each request bounded by models.HUB_TIMEOUT);
    `hub_cache(repo, {name: text})` caches a snapshot of `repo` holding those files, as the hub client lays it out."""
    from longctx import models

    class Unreachable:
        def head(self, url, timeout):
            assert timeout == models.HUB_TIMEOUT  # bounded: the hub client's own retries took 27 s here
            raise ConnectionError(f"no route to {url}")

    monkeypatch.setattr("huggingface_hub.utils.get_session", Unreachable)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # (transformers reads it for a cached config)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def cache(repo: str, found: dict) -> Path:
        folder = tmp_path / f"models--{repo.replace('/', '--')}"
        (folder / "snapshots" / "abc").mkdir(parents=True, exist_ok=True)
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text("abc")
        for name, text in found.items():
            (folder / "snapshots" / "abc" / name).write_text(text)
        return folder / "snapshots" / "abc"

    return cache


@pytest.fixture
def synthetic(monkeypatch):
    """The synthetic lesson's folder as the lessons' folder (LONGCTX_NOTEBOOKS): its kernel sees it too."""
    monkeypatch.setenv("LONGCTX_NOTEBOOKS", str(SYNTHETIC))
    return SYNTHETIC


if __name__ == "__main__":  # the background runner: python conftest.py SHARED LESSON...
    shared, *lessons = sys.argv[1:]
    for lesson in lessons:
        try:
            run_once(Path(shared), lesson)
        except Exception as exc:  # the test that reads this lesson runs it again in the foreground and shows the error
            print(f"lesson runner: {lesson}: {exc}", file=sys.stderr)
