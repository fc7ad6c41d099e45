"""How `longctx site` writes: a fresh folder beside the target, swapped in whole, the target's links never followed
and its mode kept, the user's files carried over, damaged runs and a full disk refused by name. Runs are stand-ins
(the lesson's notebook, not executed, and a results.json): nothing is executed, so these run in the fast tier."""

import errno
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from longctx import LongctxError, files
from longctx.run import harness
from longctx.tools import site
from longctx.tools.figures import GUIDE_FIGURES

FIRST = next(iter(harness.notebooks()))


@pytest.fixture
def run(tmp_path):
    """A stand-in run of the first lesson at `ci`."""
    folder = tmp_path / "runs" / FIRST
    folder.mkdir(parents=True)
    nb = nbformat.read(harness.notebooks()[FIRST], as_version=4)  # the lesson's cells, as papermill leaves them
    nb.metadata["papermill"] = {"input_path": f"notebooks/{FIRST}.ipynb"}  # as papermill records the lesson it ran
    nbformat.write(nb, folder / f"{FIRST}.ipynb")
    results = {"size": "ci", "finished": "2026-12-05T10:00:00", "seconds": 3.0, "versions": {"torch": "2.13.0"}}
    (folder / "results.json").write_text(json.dumps(results))
    return folder / f"{FIRST}.ipynb"


def build(out, runs):
    return site.build("ci", out, runs=runs, figures=out.parent / "no-figures", progress=False)


def test_a_rebuild_replaces_the_last_build_whole_and_keeps_what_the_user_added(tmp_path, run):
    out = build(tmp_path / "site", {FIRST: run})
    shown = out / "lessons" / f"{FIRST}.ipynb"  # mkdocs-jupyter's download of the executed notebook
    assert shown.is_file()
    (out / "lessons" / "notes.html").write_text("the user's")
    build(out, {})
    assert not shown.exists()  # the earlier run is not left behind
    assert (out / "lessons" / "notes.html").read_text() == "the user's"
    assert "Not executed" in (out / "lessons" / f"{FIRST}.html").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]  # no temporary left beside it


def test_a_link_inside_the_site_is_never_written_through(tmp_path, run):
    out = build(tmp_path / "site", {FIRST: run})
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("another folder's file")
    page = out / "lessons" / f"{FIRST}.html"
    page.unlink()
    page.symlink_to(elsewhere)  # a page of the last build, replaced by a link out of the folder
    build(out, {FIRST: run})
    assert elsewhere.read_text() == "another folder's file" and not page.is_symlink()


def test_a_users_link_where_the_build_writes_is_refused_and_nothing_changes(tmp_path, run):
    out = build(tmp_path / "site", {FIRST: run})
    other = tmp_path / "other"
    other.mkdir()
    (out / "mine").symlink_to(other)  # at the top: refused as it is claimed
    with pytest.raises(LongctxError, match="mine is a symbolic link: the command would write through it"):
        build(out, {FIRST: run})
    (out / "mine").unlink()
    nested = out / "assets" / "javascripts"
    shutil.move(nested, other / "javascripts")
    nested.symlink_to(other / "javascripts")  # the user's link, where the build writes a folder
    before = sorted(p.name for p in (other / "javascripts").iterdir())
    with pytest.raises(LongctxError, match="is yours, and the new build writes assets/javascripts"):
        build(out, {FIRST: run})
    assert nested.is_symlink() and sorted(p.name for p in (other / "javascripts").iterdir()) == before


def test_the_folders_mode_is_kept(tmp_path, run):
    out = tmp_path / "site"
    out.mkdir(mode=0o700)
    build(out, {})
    assert out.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "damage",
    [
        "no-versions",
        "params-a-list",
        "seconds-true",
        "html-in-a-version",
        "nested-too-deep",
        "papermill-a-list",
        "cut-notebook",
        "not-a-notebook",
    ],
)
def test_a_damaged_run_is_refused_by_name_before_anything_is_built(tmp_path, run, damage):
    results = json.loads((run.parent / "results.json").read_text())
    if damage == "no-versions":
        del results["versions"]
        (run.parent / "results.json").write_text(json.dumps(results))
    elif damage == "params-a-list":  # checked against the one schema of a results.json, not field by field
        (run.parent / "results.json").write_text(json.dumps({**results, "params": [1]}))
    elif damage == "seconds-true":  # a JSON true is no duration ("in 1 s" otherwise)
        (run.parent / "results.json").write_text(json.dumps({**results, "seconds": True}))
    elif damage == "html-in-a-version":  # blank lines would end the code span it is shown in, and the HTML would run
        versions = {**results["versions"], "torch": "2.13.0\n\n<script>alert(1)</script>\n\n"}
        (run.parent / "results.json").write_text(json.dumps({**results, "versions": versions}))
    elif damage == "papermill-a-list":
        nb = nbformat.read(run, as_version=4)
        nb.metadata["papermill"] = ["x"]
        nbformat.write(nb, run)
    elif damage == "nested-too-deep":  # past what Python's JSON reader follows
        (run.parent / "results.json").write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        text = run.read_text()
        run.write_text(text[: len(text) // 2] if damage == "cut-notebook" else "[1, 2]")
    out = tmp_path / "site"
    with pytest.raises(LongctxError, match=rf"{run.parent}.*cannot be shown.*longctx run {FIRST[:2]} --size ci"):
        build(out, {FIRST: run})
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_a_full_disk_leaves_the_last_site_as_it_was(tmp_path, run, monkeypatch):
    out = build(tmp_path / "site", {FIRST: run})
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    copy = shutil.copyfile

    def fills_up(src, dst, *args, **kwargs):
        if str(dst).endswith("GLOSSARY.md"):  # half-way through the docs
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return copy(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", fills_up)
    with pytest.raises(LongctxError, match="The disk is full"):
        build(out, {})
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]


@pytest.mark.parametrize("damage", ["cut-results", "another-lessons-run", "fifo-notebook"])
def test_a_run_in_the_build_folder_too_damaged_to_show_is_refused_not_shown_as_not_executed(tmp_path, run, monkeypatch, damage):
    build_dir = tmp_path / "build"
    shutil.copytree(run.parent, build_dir / FIRST)
    results, executed = build_dir / FIRST / "results.json", build_dir / FIRST / f"{FIRST}.ipynb"
    if damage == "cut-results":
        results.write_text(results.read_text()[:20])
    elif damage == "another-lessons-run":
        results.write_text(json.dumps({**json.loads(results.read_text()), "notebook": "01_chunked_loss"}))
    else:
        executed.unlink()
        os.mkfifo(executed)  # read, it would block for ever
    monkeypatch.setenv("LONGCTX_BUILD", str(build_dir))
    with pytest.raises(LongctxError, match=rf"{FIRST} cannot be shown: .*longctx run {FIRST[:2]} --size ci"):
        site.build("ci", tmp_path / "site", figures=tmp_path / "none", progress=False)
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize(
    "damage",
    ["another-lessons-notebook", "another-runs-notebook", "another-size", "nan-seconds", "linked-notebook", "markup-cell-id"],
)
def test_a_run_whose_notebook_is_not_that_lessons_own_is_refused(tmp_path, run, damage):
    results = json.loads((run.parent / "results.json").read_text())
    if damage == "another-runs-notebook":  # the executed notebook of a run with other parameters, beside these results
        nb = nbformat.read(run, as_version=4)
        nb.metadata["papermill"]["parameters"] = {"SEQ_LEN": 64}
        nbformat.write(nb, run)
        (run.parent / "results.json").write_text(json.dumps({**results, "params": {"SEQ_LEN": 2048}}))
        why = "ran with SEQ_LEN=64, its results.json with 2048"
    elif damage == "nan-seconds":  # a hand-edited results.json: "in nan s" on the page
        (run.parent / "results.json").write_text(json.dumps({**results, "seconds": float("nan")}))
        why = "its results.json's seconds nan is not a duration"
    elif damage == "another-size":
        (run.parent / "results.json").write_text(json.dumps({**results, "size": "cpu"}))
        why = "its results.json is of a run at size 'cpu', not 'ci'"
    elif damage == "another-lessons-notebook":  # the results.json is the lesson's; the executed notebook another's
        nb = nbformat.read(run, as_version=4)
        nb.metadata["papermill"]["input_path"] = "notebooks/01_chunked_loss.ipynb"
        nbformat.write(nb, run)
        why = f"is a run of 01_chunked_loss.ipynb, not of {FIRST}"
    elif damage == "markup-cell-id":  # no notebook nbformat validates: MkDocs stopped on it, naming no file
        raw = json.loads(run.read_text())
        raw["cells"][1]["id"] = 'x"><script>alert(1)</script>'
        run.write_text(json.dumps(raw))
        why = rf"{FIRST}.ipynb cannot be read as a notebook \(.*<script>alert\(1\)</script>.* does not match"
    else:  # a link: the site copies what it shows, never through a link
        shutil.move(run, tmp_path / "elsewhere.ipynb")
        run.symlink_to(tmp_path / "elsewhere.ipynb")
        why = f"{FIRST}.ipynb is a link"
    with pytest.raises(LongctxError, match=why):
        build(tmp_path / "site", {FIRST: run})


def test_a_figure_that_is_a_link_is_refused_and_a_results_field_is_shown_as_text(tmp_path, run):
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "index.md").write_text("# figures\n\n![x](x.png)\n")
    with pytest.raises(LongctxError, match="figures is a folder that `longctx figures` did not write"):
        site.build("ci", tmp_path / "site", runs={FIRST: run}, figures=figures, progress=False)
    files.mark_claimed(figures, "figures")
    (tmp_path / "secret").write_text("not a figure")
    first = next(iter(GUIDE_FIGURES))
    (figures / f"{first}.png").symlink_to(tmp_path / "secret")
    with pytest.raises(LongctxError, match=f"{first}.png is a link, not a figure `longctx figures` wrote"):
        site.build("ci", tmp_path / "site", runs={FIRST: run}, figures=figures, progress=False)
    (figures / f"{first}.png").unlink()
    os.link(tmp_path / "secret", figures / f"{first}.png")  # a hard link: a regular file, and no image
    with pytest.raises(LongctxError, match=f"{first}.png is not the image it is named, not a figure"):
        site.build("ci", tmp_path / "site", runs={FIRST: run}, figures=figures, progress=False)
    (figures / f"{first}.png").unlink()
    for name in GUIDE_FIGURES:  # the figures as matplotlib writes them, and a file of the user's beside them
        for ext, head in (("png", b"\x89PNG\r\n\x1a\n"), ("svg", b'<?xml version="1.0"?><svg/>')):
            (figures / f"{name}.{ext}").write_bytes(head)
    (figures / "secret.png").write_text("the user's")
    (figures / "index.md").write_text("[notes](javascript:alert(1))")  # an index edited by hand
    out = site.build("ci", tmp_path / "site", runs={FIRST: run}, figures=figures, progress=False)
    assert (
        not (out / "figures" / "secret.png").exists() and "javascript:alert" not in (out / "figures" / "index.html").read_text()
    )
    assert (out / "figures" / f"{first}.png").read_bytes().startswith(b"\x89PNG")
    (tmp_path / "linked").symlink_to(figures, target_is_directory=True)  # the whole folder a link to elsewhere
    with pytest.raises(LongctxError, match="linked is a link that `longctx figures` did not write"):
        site.build("ci", tmp_path / "site", runs={FIRST: run}, figures=tmp_path / "linked", progress=False)
    results = json.loads((run.parent / "results.json").read_text())
    (run.parent / "results.json").write_text(json.dumps({**results, "finished": "<script>alert(1)</script>"}))
    with pytest.raises(LongctxError, match="finished '<script>alert\\(1\\)</script>' is not a time"):
        build(tmp_path / "site", {FIRST: run})
    link = "[see](javascript:alert(1))"  # a version that would be a link in Markdown: no version a run writes
    (run.parent / "results.json").write_text(json.dumps({**results, "versions": {"torch": link}}))
    with pytest.raises(LongctxError, match="versions.torch: not a name a run writes there"):
        build(tmp_path / "site", {FIRST: run})
    (run.parent / "results.json").write_text(json.dumps(results))
    page = (build(tmp_path / "site", {FIRST: run}) / "lessons" / f"{FIRST}.html").read_text()
    assert f"<code>{', '.join(f'{k} {v}' for k, v in sorted(results['versions'].items()))}</code>" in page  # as code


def test_the_users_files_and_empty_folders_move_before_the_swap_or_nothing_changes(tmp_path, run, monkeypatch):
    out = build(tmp_path / "site", {FIRST: run})
    (out / "drafts").mkdir()  # an empty folder of the user's is carried like a file
    (out / "mine.txt").write_text("the user's")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    replace = os.replace

    def immovable(src, dst):  # (`chattr +i` as root: the rename is refused)
        if str(src).endswith("mine.txt"):
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(src))
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", immovable)
    with pytest.raises(LongctxError, match="mine.txt could not be moved .* Nothing was changed"):
        build(out, {})
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before and (out / "drafts").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]
    monkeypatch.undo()
    build(out, {})
    assert (out / "drafts").is_dir() and (out / "mine.txt").read_text() == "the user's"
    monkeypatch.setattr(os.path, "ismount", lambda p: str(p) == str(out))
    with pytest.raises(LongctxError, match="is a mount point"):
        build(out, {})


def test_what_is_left_of_the_last_build_is_said(tmp_path, run, monkeypatch, capsys):
    out = build(tmp_path / "site", {FIRST: run})

    def stuck(path, onerror):  # (an immutable file of the last build's: `chattr +i` as root)
        onerror(os.unlink, str(Path(path) / "index.html"), (PermissionError, PermissionError(), None))

    monkeypatch.setattr(shutil, "rmtree", stuck)
    build(out, {FIRST: run})
    left = next(p for p in tmp_path.iterdir() if p.name.startswith(".site.old-"))
    assert f"what is left of it is in {left}" in capsys.readouterr().err


def test_an_edited_lesson_is_refused_and_a_script_in_an_output_is_escaped(tmp_path, run):
    nb = nbformat.read(run, as_version=4)
    html = "<table><tr><td>kept</td></tr></table><script>alert(1)</script>"  # a pandas table, and what no output holds
    output = nbformat.v4.new_output("display_data", data={"text/plain": "a table", "text/html": html})
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    sized = {"image/png": {"width": 4, "height": "1 onload=alert(2)"}}  # nbconvert writes the size unquoted
    image = nbformat.v4.new_output("display_data", data={"image/png": png}, metadata=sized)
    next(c for c in nb.cells if c.cell_type == "code").outputs = [output, image]
    nbformat.write(nb, run)
    page = (build(tmp_path / "site", {FIRST: run}) / "lessons" / f"{FIRST}.html").read_text()
    assert "<td>kept</td>" in page and "<script>alert(1)</script>" not in page  # nbconvert's SanitizeHTML (bleach)
    assert "onload" not in page and 'width="4"' in page  # an image's size kept when it is a number
    markdown = nbformat.v4.new_output("display_data", data={"text/markdown": "[notes](javascript:alert(3))"})
    next(c for c in nb.cells if c.cell_type == "code").outputs = [markdown]  # a Markdown output: no lesson writes one
    nbformat.write(nb, run)
    page = (build(tmp_path / "site", {FIRST: run}) / "lessons" / f"{FIRST}.html").read_text()
    assert "javascript:alert(3)" not in page
    nb.cells[0].source += "\n\n[more](javascript:alert(1))"  # the lesson's text edited: it would be shown as the lesson's
    nbformat.write(nb, run)
    with pytest.raises(LongctxError, match=f"{FIRST}.ipynb's cell 1 is not the lesson's as committed"):
        build(tmp_path / "site", {FIRST: run})


def test_only_the_cell_papermill_injects_for_the_recorded_parameters_is_taken_beside_the_lessons(tmp_path, run):
    """A cell tagged `injected-parameters` is taken only where papermill puts it and as it writes the recorded
    parameters: another such cell (code or markdown), an edited one or an attachment would be shown as the lesson's."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(run))  # as papermill reads it (every cell given its tags)
    nb = parameterize_notebook(nb, {"SEQ_LEN": 40, "MODEL": "tiny"})  # papermill's own cell, as a run gets it
    nbformat.write(nb, run)
    build(tmp_path / "site", {FIRST: run})
    at = next(i for i, c in enumerate(nb.cells) if "injected-parameters" in c.metadata.get("tags", []))

    def refused(change, cell):
        damaged = nbformat.read(run, as_version=4)
        change(damaged)
        nbformat.write(damaged, tmp_path / "damaged.ipynb")
        shutil.copy(tmp_path / "damaged.ipynb", run.parent / "shown.ipynb")
        with pytest.raises(LongctxError, match=f"cell {cell} is not the lesson's as committed"):
            build(tmp_path / "site", {FIRST: run.parent / "shown.ipynb"})

    extra = nbformat.v4.new_markdown_cell("[notes](javascript:alert(1))", metadata={"tags": ["injected-parameters"]})
    refused(lambda d: d.cells.insert(at + 1, extra), at + 2)
    refused(lambda d: d.cells[at].__setitem__("source", d.cells[at].source + "import shutil\n"), at + 1)
    svg = {"x.svg": {"image/svg+xml": "<svg onload='alert(1)'/>"}}
    refused(lambda d: d.cells[0].__setitem__("attachments", svg), 1)


def test_a_disk_without_room_for_the_sites_files_is_refused_before_it_is_built(tmp_path, run, monkeypatch):
    """A disk with megabytes free and no inodes left was reported full (with 50 MiB free) once the build had failed."""
    real = os.statvfs(tmp_path)  # (shutil.disk_usage reads the same call: its space is the real one)
    room = type("Room", (), {k: getattr(real, k) for k in dir(real) if k.startswith("f_")})
    room.f_files, room.f_favail = 10_000, site.SITE_FILES - 1
    monkeypatch.setattr(os, "statvfs", lambda path: room)
    with pytest.raises(LongctxError, match=rf"room for {room.f_favail} new files \(inodes\); the site is built beside it"):
        build(tmp_path / "site", {FIRST: run})
    assert not (tmp_path / "site").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
