"""What every lesson hands the reader, read from the committed notebooks (nothing is executed here; the
executed `ci` runs in test_notebooks.py run the same cells, and their asserts, for real)."""

import re

import nbformat
import pytest

from longctx.paths import REPO
from longctx.run import harness

NOTEBOOKS = list(harness.notebooks())
LEVER_NOTEBOOKS = [n for n in NOTEBOOKS if n != "06_one_million_tokens"]  # 06 puts the levers together: no mechanism


def _cells(name):
    return nbformat.read(harness.notebooks()[name], as_version=4).cells


def _markdown(name):
    return "\n".join(c.source for c in _cells(name) if c.cell_type == "markdown")


def _code(name):
    return "\n".join(c.source for c in _cells(name) if c.cell_type == "code")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_lesson_prints_its_recipe_from_the_config_it_ran(name):
    assert re.search(r"^#+ .*In your own script", _markdown(name), re.M), name
    assert "recipe.show(" in _code(name), f"{name}: the snippet must be printed from a config, not typed"


@pytest.mark.parametrize("name", LEVER_NOTEBOOKS)
def test_every_lever_lesson_opens_the_mechanism_in_a_few_checked_lines(name):
    cells = _cells(name)
    heads = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "Look inside" in c.source]
    assert heads, f"{name}: no 'Look inside' section"
    code = next(c.source for c in cells[heads[0] + 1 :] if c.cell_type == "code")
    lines = [x for x in code.splitlines() if x.strip() and not x.lstrip().startswith(("import ", "from "))]
    assert len(lines) <= 20, f"{name}: the look-inside cell has {len(lines)} lines"
    assert "assert" in code or "allclose" in code, f"{name}: the look-inside cell checks nothing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_lesson_has_exercises_with_answers_a_recap_and_a_next_step(name):
    text = _markdown(name)
    exercises = text.split("## Exercises", 1)
    assert len(exercises) == 2, f"{name}: no exercises"
    assert exercises[1].count("<details><summary>Answer</summary>") >= 2, f"{name}: fewer than two answered exercises"
    assert re.search(r"^## (Recap|Conclusion)", text, re.M), f"{name}: no recap"
    following = NOTEBOOKS[NOTEBOOKS.index(name) + 1] if name != NOTEBOOKS[-1] else None
    if following:
        assert f"]({following}.ipynb)" in text, f"{name}: no link to {following}"
    for target in re.findall(r"\]\((\d\d_\w+\.ipynb)\)", text):
        assert (REPO / "notebooks" / target).is_file(), f"{name} links to a missing {target}"


def _lever_table(text):
    return [
        line
        for line in text.splitlines()
        if line.startswith("| ") and "what it fixes" not in line and line.count("|") == 5 and "(0" in line
    ]


def test_the_readme_cheat_sheet_is_the_table_lesson_06_ends_on():
    readme = _lever_table((REPO / "README.md").read_text())
    assert len(readme) == 9 and readme == _lever_table(_markdown("06_one_million_tokens"))


TEMPLATE = REPO / "notebooks" / "templates" / "lesson.ipynb"


@pytest.mark.slow
def test_the_lesson_template_has_every_section_a_lesson_needs_and_runs(tmp_path, monkeypatch):
    """notebooks/templates/lesson.ipynb, where README's "Adding a lesson" starts: the sections the tests above ask
    of every lesson, committed clean, and it runs as it stands (its session writes results.json)."""
    import json

    from nbclient import NotebookClient

    nb = nbformat.read(TEMPLATE, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c for c in code if "parameters" in c.metadata.get("tags", [])] == [code[0]]
    assert re.search(r"^#+ .*In your own script", text, re.M) and any("recipe.show(" in c.source for c in code)
    assert re.search(r"^## .*Look inside", text, re.M)
    assert text.split("## Exercises", 1)[1].count("<details><summary>Answer</summary>") >= 2
    assert re.search(r"^## Recap", text, re.M) and code[-1].source == "session.save()"
    assert not any(c.outputs or c.execution_count for c in code)
    monkeypatch.setenv("LONGCTX_OUT", str(tmp_path))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert json.loads((tmp_path / "results.json").read_text())["results"]["after_over_before"] == 0.5
