"""No output is ever left truncated under its final name: a full disk (ENOSPC, a real small tmpfs) or a
file-size limit (EFBIG, RLIMIT_FSIZE) while writing the executed notebook, results.json or a figure leaves
no file cut off in place and no temporary behind, and an earlier results.json or figure stays as it was."""

import contextlib
import resource
import shutil
import signal
import subprocess

import nbformat
import pytest

from longctx import LongctxError
from longctx.notebook import write_json_atomic
from longctx.run import harness

FREE = 48 * 1024  # bytes left free on the small disk, or the file-size limit: below each output written here


@contextlib.contextmanager
def full_disk(tmp_path):
    """A folder on a tmpfs with FREE bytes left (mounting needs root; CI runs as root)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        (folder / "filler").write_bytes(b"\0" * (shutil.disk_usage(folder).free - FREE))
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@contextlib.contextmanager
def size_limit(tmp_path):
    """Files written by this process (and the kernels it starts) stop at FREE bytes with EFBIG."""
    folder = tmp_path / "limited"
    folder.mkdir()
    before = resource.getrlimit(resource.RLIMIT_FSIZE), signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FREE, before[0][1]))
    try:
        yield folder
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, before[0])
        signal.signal(signal.SIGXFSZ, before[1])


FAILURES = pytest.mark.parametrize("failing", [full_disk, size_limit], ids=["ENOSPC", "EFBIG"])


def _leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


@FAILURES
def test_results_json_keeps_the_previous_file(tmp_path, failing):
    with failing(tmp_path) as folder:
        (folder / "results.json").write_text('{"previous": true}')
        with pytest.raises(LongctxError, match="writ"):
            write_json_atomic(folder / "results.json", {"numbers": list(range(100_000))})
        assert (folder / "results.json").read_text() == '{"previous": true}'
        assert _leftovers(folder) == []


@FAILURES
def test_a_figure_keeps_the_previous_file(tmp_path, failing):
    import matplotlib.pyplot as plt
    import numpy as np

    from longctx import plots

    fig, ax = plt.subplots()
    ax.imshow(np.random.default_rng(0).random((400, 400)))  # a PNG well over FREE bytes
    with failing(tmp_path) as folder:
        (folder / "big.png").write_bytes(b"previous")
        with pytest.raises(LongctxError, match="writ"):
            plots.save_figure(fig, "big", folder)
        assert (folder / "big.png").read_bytes() == b"previous"
        assert _leftovers(folder) == []


@pytest.mark.slow
@FAILURES
def test_an_executed_notebook_is_never_left_cut_off(tmp_path, failing, monkeypatch):
    monkeypatch.setattr(harness, "RUN_FREE_BYTES", 0)  # past the free-space check before the kernel: the write itself fails
    original = nbformat.read(harness.notebooks()["00_memory_primer"], as_version=4)
    params = next(c for c in original.cells if "parameters" in c.metadata.get("tags", []))
    mine = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell("print('x' * 200_000)")])
    mine.metadata = original.metadata
    path = tmp_path / "copy" / "00_memory_primer.ipynb"
    path.parent.mkdir()
    nbformat.write(mine, path)
    with failing(tmp_path) as folder:
        with pytest.raises(LongctxError) as err:
            harness.run(str(path), "ci", out=folder / "out", progress=False)
        assert "writ" in str(err.value)
        assert not (folder / "out" / path.name).exists() and _leftovers(folder) == []


def test_an_output_where_no_folder_can_be_made_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RUN_FREE_BYTES", 0)  # (/proc has no free space to speak of)
    with pytest.raises(LongctxError, match=r"Could not write /proc/longctx-\w+: .*Choose an ordinary writable folder \(--out"):
        harness.run("01", "ci", out=f"/proc/longctx-{tmp_path.name}")  # a place that takes no folder


def test_a_run_onto_a_nearly_full_disk_is_refused_before_the_kernel(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=harness.RUN_FREE_BYTES - 1))
    with pytest.raises(LongctxError, match=r"MiB free; a run writes its executed notebook, .*Nothing was started"):
        harness.run("01", "ci", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_disk_out_of_inodes_is_named_as_such_before_the_kernel_and_in_a_failed_write(tmp_path, monkeypatch):
    """A file system with space but no inodes left (a tmpfs of few files): the run refused before its kernel, and a
    failed write saying so, not "full" beside hundreds of free MiB."""
    import errno
    import os

    from longctx import files

    real = os.statvfs(tmp_path)  # (shutil.disk_usage reads the same call: its space is the real one)
    Room = type("Room", (), {k: getattr(real, k) for k in dir(real) if k.startswith("f_")})
    Room.f_files, Room.f_favail = 10_000, harness.RUN_FREE_FILES - 1
    monkeypatch.setattr(os, "statvfs", lambda path: Room)
    with pytest.raises(LongctxError, match=rf"room for {Room.f_favail} new files \(inodes\); a run writes .*Nothing was started"):
        harness.run("01", "ci", out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    Room.f_favail = 0
    said = str(files.write_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "fig.png"))
    assert said.startswith(f"The disk has room for no more files (its inodes are used up) while writing {tmp_path}")
