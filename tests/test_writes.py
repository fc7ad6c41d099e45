"""The one write rule (longctx/files.py): a command writes into a folder that is new, empty, or carries its marker,
replaces only its own names, never through a link, and stages every write so that nothing is left half-written; the
site is built beside its folder and swapped in whole, showing only runs `longctx run` wrote. Stand-in runs: nothing is
executed here."""

import errno
import json
import re

import nbformat
import pytest
from conftest import refused

from longctx import files, plots
from longctx.notebook import write_json_atomic
from longctx.run import harness
from longctx.tools import site

MARK = files.MARKER.format("cmd")
# (what the folder holds: "x/" a folder, "x@" a link out of it, None: --out a link to nothing; its marker: True, "by hand"
# (other content) or "link"; --force; refused) for a command that writes "out.json" and a folder "runs/"
CLAIMS = [
    ([], False, False, False),  # empty
    (["notes.txt"], False, False, True),  # the user's folder
    (["notes.txt"], False, True, False),  # --force: the command's files beside the user's
    (["out.json"], False, True, True),  # --force never writes over a file of the user's of a name it writes
    (["out.json", "runs/"], True, False, False),  # its own folder, written again
    (["notes.txt"], True, False, False),  # its own folder: whatever it wrote there is its own
    (["runs"], True, False, True),  # a file where it writes a folder
    (["out.json/"], True, False, True),  # a folder where it writes a file
    (["runs@"], True, False, True),  # a link where it writes: it would write through it
    (["out.json"], "by hand", False, True),  # a marker made by hand is no marker
    (["out.json"], "link", False, True),  # nor is a link of its name
    (None, False, False, True),  # --out a link to nothing
]


@pytest.mark.parametrize("present,marked,force,refuses", CLAIMS)
def test_an_output_folder_is_new_empty_or_one_the_command_wrote(tmp_path, present, marked, force, refuses):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.symlink_to(tmp_path / "nowhere") if present is None else out.mkdir()
    for name in present or []:
        path = out / name.rstrip("/@")
        path.symlink_to(elsewhere) if name.endswith("@") else path.mkdir() if name.endswith("/") else path.write_text("mine")
    if marked is True:
        files.mark_claimed(out, "cmd")
    elif marked:
        (out / MARK).symlink_to(elsewhere / "x") if marked == "link" else (out / MARK).write_text('["x"]')
    before = {p.name: p.lstat().st_mtime_ns for p in out.iterdir()} if out.is_dir() else None
    if refuses:
        with refused(str(out)):
            files.claim(out, "cmd", {"out.json": False, "runs": True}, force=force)
        assert ({p.name: p.lstat().st_mtime_ns for p in out.iterdir()} if out.is_dir() else None) == before  # untouched
    else:
        assert files.claim(out, "cmd", {"out.json": False, "runs": True}, force=force) == out and files.claimed(out, "cmd")
    assert not list(elsewhere.iterdir()) and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG])
def test_a_failed_write_keeps_the_previous_file_whole(tmp_path, monkeypatch, code):
    write_json_atomic(tmp_path / "results.json", {"run": 1})
    fig = plots.plt.figure()
    plots.save_figure(fig, "kept", tmp_path)
    before = (tmp_path / "kept.png").read_bytes()

    def fails(*args, **kwargs):
        raise OSError(code, "failed")

    monkeypatch.setattr("json.dumps", fails)
    monkeypatch.setattr(type(fig), "savefig", fails)
    for write in (
        lambda: write_json_atomic(tmp_path / "results.json", {"run": 2}),
        lambda: plots.save_figure(fig, "kept", tmp_path),
    ):
        with pytest.raises(OSError):
            write()
    monkeypatch.undo()
    assert json.loads((tmp_path / "results.json").read_text()) == {"run": 1} and (tmp_path / "kept.png").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.png", "kept.svg", "results.json"]  # no temporaries


FIRST = next(iter(harness.notebooks()))


@pytest.fixture
def run(tmp_path):
    """A stand-in run of the first lesson at `ci`, in a folder `longctx run` claimed."""
    folder = files.claim(tmp_path / "runs" / FIRST, "run")
    nb = nbformat.read(harness.notebooks()[FIRST], as_version=4)
    nbformat.write(nb, folder / f"{FIRST}.ipynb")
    results = {"notebook": FIRST, "size": "ci", "finished": "2026-12-05T10:00:00", "seconds": 3.0, "lesson_edited": True,
               "versions": {"torch": "2.13.0"}}  # fmt: skip
    (folder / "results.json").write_text(json.dumps(results))
    return folder / f"{FIRST}.ipynb"


def _build(out, runs):
    return site.build("ci", out, runs=runs, figures=out.parent / "no-figures", progress=False)


def test_the_site_is_swapped_in_whole_keeping_what_the_user_added(tmp_path, run):
    out = _build(tmp_path / "site", {FIRST: run})
    page = (out / "lessons" / f"{FIRST}.html").read_text()
    assert "differs from the lesson as committed" in page  # the run's record says its lesson was edited
    (out / "lessons" / "notes.html").write_text("the user's")
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("another folder's file")
    (out / "lessons" / f"{FIRST}.html").unlink()
    (out / "lessons" / f"{FIRST}.html").symlink_to(elsewhere)  # a page of the last build, replaced by a link
    _build(out, {})
    assert (out / "lessons" / "notes.html").read_text() == "the user's" and elsewhere.read_text() == "another folder's file"
    page = re.sub(r"<[^>]+>", "", (out / "lessons" / f"{FIRST}.html").read_text())  # the text read
    assert "Not executed" in page and f"longctx run {FIRST[:2]} --size ci" in page  # with the command that runs it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.html", "runs", "site"]  # no temporary beside it


def test_the_site_shows_only_the_runs_longctx_run_marked_as_its_own(tmp_path, run, monkeypatch):
    monkeypatch.setenv("LONGCTX_BUILD", str(run.parent.parent))  # the run where `longctx run` puts it
    assert "Not executed" not in (site.build("ci", tmp_path / "site", progress=False) / "lessons" / f"{FIRST}.html").read_text()
    (run.parent / files.MARKER.format("run")).unlink()  # a folder of the user's, holding what looks like a run
    out = site.build("ci", tmp_path / "site", progress=False)
    assert "Not executed" in (out / "lessons" / f"{FIRST}.html").read_text()
