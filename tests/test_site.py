"""The static site built from the `ci` runs: every page there, every link and image resolving (checked without a
browser; `make site-check` opens the pages in Chromium), a lesson not executed shown with its command."""

import json
import re

import pytest

from longctx import LongctxError
from longctx.run import harness
from longctx.tools import site


@pytest.fixture(scope="module")
def ci_runs(executed):
    return {name: executed(name, "ci").executed for name in harness.notebooks()}


def test_the_site_has_every_lesson_its_run_and_no_broken_link(ci_runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the command's working folder gets nothing (no converter cache)
    out = site.build("ci", tmp_path / "site", runs=ci_runs, progress=False)
    assert site.broken_links(out) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    assert (out / "GLOSSARY.html").is_file()
    calculator = (out / "calculator" / "index.html").read_text()  # the page, its script and its data beside it
    assert '<script src="estimates.js">' in calculator and (out / "calculator" / "estimates.js").is_file()
    assert 'href="calculator/index.html"' in (out / "index.html").read_text()
    for i, name in enumerate(harness.notebooks()):
        page = (out / "lessons" / f"{name}.html").read_text()
        results = json.loads((ci_runs[name].parent / "results.json").read_text())
        assert results["size"] == "ci" and results["finished"] in page  # the run it shows, and when it finished
        assert f"transformers {results['versions']['transformers']}" in page
        assert f"../source/{name}.ipynb" in page and (out / "source" / f"{name}.ipynb").is_file()
        assert ("Next:" if i < len(ci_runs) - 1 else "Last lesson") in page
        assert "Traceback (most recent call last)" not in page
        assert 'href="../GLOSSARY.html"' in page and ".ipynb)" not in page  # the lessons' own links, made pages'
    assert page.count("data:image/png;base64") >= 1  # figures embedded in the lesson pages


def test_a_lesson_not_executed_is_shown_with_its_command_and_a_rebuild_keeps_what_the_user_added(ci_runs, tmp_path):
    some = {k: v for k, v in ci_runs.items() if not k.startswith("04")}
    out = site.build("ci", tmp_path / "site", runs=some, progress=False)
    page = re.sub(r"<[^>]+>", "", (out / "lessons" / "04_context_parallelism.html").read_text())  # the text read
    assert "Not executed at the ci size" in page and "longctx run 04 --size ci" in page
    yours = out / "lessons" / "notes.html"
    yours.write_text("the user's")
    site.build("ci", out, runs=ci_runs, progress=False)  # the site's own pages are replaced, the user's file kept
    assert yours.read_text() == "the user's"
    assert "Not executed" not in (out / "lessons" / "04_context_parallelism.html").read_text()


def test_the_site_never_replaces_a_folder_it_did_not_build(ci_runs, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(LongctxError, match="holds files `longctx site` did not write"):
        site.build("ci", mine, runs=ci_runs, progress=False)
    assert (mine / "notes.txt").read_text() == "mine"


def test_broken_links_are_found(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="b.html">b</a><img src="fig.png"><a href="https://example.org">x</a>'
        '<a href="#top">top</a><link href="/assets/x.css">'
    )
    (tmp_path / "b.html").write_text("<p>b</p>")
    assert site.broken_links(tmp_path) == ["a.html: fig.png", "a.html: /assets/x.css"]
