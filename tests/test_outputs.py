"""Writes that never leave half a file, and the marker of a claimed folder."""

import pytest

from longctx import LongctxError, files


def test_an_atomic_write_replaces_the_file_only_when_it_completes(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), files.atomic(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]
    with files.atomic(path) as tmp:
        tmp.write_text("new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_a_failed_write_is_named_and_leaves_nothing(tmp_path):
    missing = tmp_path / "no-such-folder" / "x.json"
    with pytest.raises(LongctxError, match="x.json"), files.atomic(missing) as tmp:
        tmp.write_text("x")


def test_a_write_onto_a_read_only_place_is_named_not_the_cleanup_after_it(tmp_path, monkeypatch):
    """`data --force` on a read-only bind mount ended in a raw OSError from removing a temporary never made."""
    import errno
    from pathlib import Path

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(LongctxError, match=r"Cannot write .*x.json: Read-only file system. Choose a writable folder"):
        with files.atomic(tmp_path / "x.json") as tmp:
            read_only(tmp)  # the write itself


def test_a_folder_marked_by_hand_is_one_claim_folder_accepts(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text("<p>")
    with pytest.raises(LongctxError, match="did not write"):
        files.claim_folder(folder, "site", write=False)
    files.mark_claimed(folder, "site")
    assert files.claim_folder(folder, "site", write=False) == folder.resolve()


@pytest.mark.parametrize(
    "marker,present,force,refused",
    [
        (None, ["draft.tex"], False, r"did not write \(draft.tex\).*--force"),
        (None, ["draft.tex"], True, None),
        (None, ["index.md"], True, "files of yours with the names .*index.md.*cannot write there"),
        (files.MARK, ["index.md"], False, None),
        (files.MARK, ["index.md", "draft.tex"], False, r"did not write \(draft.tex\)"),
        ('["x"]', ["index.md"], True, "cannot write there"),
    ],
    ids=[
        "a-users-folder-is-refused",
        "force-writes-beside-the-users-files",
        "force-never-replaces-a-users-file-of-a-name-it-writes",
        "its-own-folder-is-written-again",
        "its-own-folder-with-a-users-file-is-refused",
        "a-hand-made-marker-is-no-marker",
    ],
)
def test_an_output_folder_is_new_empty_or_one_the_command_wrote(tmp_path, marker, present, force, refused):
    for name in present:
        (tmp_path / name).write_text("the user's")
    if marker is not None:
        (tmp_path / ".longctx-figures.json").write_text(marker)
    writes = {"index.md", "fig.png"}
    if refused:
        with pytest.raises(LongctxError, match=refused):
            files.check_out(tmp_path, "figures", writes=writes, force=force)
    else:
        assert files.check_out(tmp_path, "figures", writes=writes, force=force) == tmp_path.resolve()
    assert all((tmp_path / name).read_text() == "the user's" for name in present)  # nothing touched


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
def test_a_command_whose_output_cannot_be_written_says_so_without_a_traceback():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "longctx.tools.cli", "list"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "could not write the output: No space left on device" in done.stderr


def test_the_default_output_folder_is_claimed_like_any_other(tmp_path):
    """build/<notebook>/ holding a file of the user's and no marker is refused, default or not; once claimed it is reused."""
    default = tmp_path / "build" / "01_chunked_loss"
    default.mkdir(parents=True)
    (default / "notes.txt").write_text("mine")
    with pytest.raises(LongctxError, match="notes.txt"):
        files.claim_folder(default, "run")
    (default / "notes.txt").unlink()
    assert files.claim_folder(default, "run") == default.resolve()
    (default / "results.json").write_text("{}")  # what the run wrote
    assert files.claim_folder(default, "run") == default.resolve()


@pytest.mark.parametrize("target", ["a-users-file", "nothing-yet"])
def test_a_link_named_as_the_marker_is_the_users_and_never_written_through(tmp_path, target):
    """A folder whose only entry is a link with the marker's name is not the command's (a run, a sweep, pretrain and
    figures wrote their marker through such a link into the file it named, or made it), and `--force` replaces the
    link itself."""
    elsewhere = tmp_path / "elsewhere.txt"
    if target == "a-users-file":
        elsewhere.write_text("the user's")
    out = tmp_path / "out"
    out.mkdir()
    (out / files.MARKER.format("run")).symlink_to(elsewhere)
    with pytest.raises(LongctxError, match=r"did not write \(.longctx-run.json\)"):
        files.claim_folder(out, "run")
    with pytest.raises(LongctxError, match=r"is not empty \(.longctx-run.json\)"):
        files.check_out(out, "run", writes={"model.safetensors"}, replace_own=False)
    files.mark_claimed(out, "run")  # what --force goes on to: the link replaced, its target untouched
    assert not (out / files.MARKER.format("run")).is_symlink() and files.claimed(out, "run")
    assert elsewhere.read_text() == "the user's" if target == "a-users-file" else not elsewhere.exists()
