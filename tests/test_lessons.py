"""What every lesson hands the reader, read from the committed notebooks (nothing is executed here; the
executed `ci` runs in test_notebooks.py run the same cells, and their asserts, for real)."""

import ast
import json
import re

import nbformat
import pytest
from nbclient import NotebookClient

from longctx import recipe
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


CONFIGS = ("SFTConfig", "GRPOConfig", "ParallelismConfig", "LoraConfig", "DeepSpeedSequenceParallelConfig")


def recipe_section(name) -> str:
    """The markdown of a lesson's "In your own script" section, to the next section."""
    text = _markdown(name)
    match = re.search(r"^#+ [^\n]*In your own script[^\n]*\n.*?(?=^## )", text, re.M | re.S)
    assert match, f"{name}: no 'In your own script' section"
    return match.group(0)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_lesson_builds_what_it_measures_in_plain_sight_and_writes_its_recipe_as_code(name):
    """The TRL configs a lesson teaches are written in its code (SFTConfig(...) for every lesson that trains), and its
    "In your own script" is literal code, which test_notebooks.py holds to the config that ran."""
    written = recipe.written(recipe_section(name))
    assert set(written) & set(CONFIGS), f"{name}: its recipe writes none of {', '.join(CONFIGS)}"
    code = _code(name)
    # a lesson that launches a script (06: scripts/sft_1m_context.py) builds its config in that script
    code += "".join((REPO / path).read_text() for path in re.findall(r"scripts/\w+\.py", code))
    assert re.search(r"\b(SFTConfig|GRPOConfig)\(", code), f"{name}: no trainer config built in its code"
    # its first cell after the parameters checks them as the CLI does (papermill and JupyterLab get the refusals)
    assert f'notebook.start("{name}", notebook.parameters(globals()))' in code, f"{name}: no notebook.start"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_recipe_that_turns_checkpointing_off_says_why(name):
    for line in recipe_section(name).splitlines():
        if "activation_checkpointing=False" in line:
            assert "#" in line.split("activation_checkpointing=False", 1)[1], f"{name}: {line.strip()}"


def bookkeeping(name) -> tuple[int, int]:
    """(lines of code, lines of print(...) and session.record(...) statements) over a lesson's code cells."""
    total = kept = 0
    for source in (c.source for c in _cells(name) if c.cell_type == "code"):
        total += sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
        for node in ast.walk(ast.parse(source)):
            call = node.value if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) else None
            name_of = getattr(call.func, "id", getattr(call.func, "attr", "")) if call else ""
            if name_of in ("print", "record"):
                kept += node.end_lineno - node.lineno + 1
    return total, kept


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_bookkeeping_is_at_most_15_percent_of_a_lessons_code(name):
    total, kept = bookkeeping(name)
    assert kept <= 0.15 * total, f"{name}: {kept} of {total} code lines print or record ({kept / total:.0%})"


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
    assert len(readme) == 11 and readme == _lever_table(_markdown("06_one_million_tokens"))


TEMPLATE = REPO / "notebooks" / "templates" / "lesson.ipynb"


@pytest.mark.slow
def test_the_lesson_template_has_every_section_a_lesson_needs_and_runs(tmp_path, monkeypatch):
    """notebooks/templates/lesson.ipynb, where README's "Adding a lesson" starts: the sections the tests above ask
    of every lesson, committed clean, and it runs as it stands (its session writes results.json)."""

    nb = nbformat.read(TEMPLATE, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c for c in code if "parameters" in c.metadata.get("tags", [])] == [code[0]]
    assert re.search(r"^#+ .*In your own script", text, re.M) and "```python" in text
    assert re.search(r"^## .*Look inside", text, re.M)
    assert text.split("## Exercises", 1)[1].count("<details><summary>Answer</summary>") >= 2
    assert re.search(r"^## Recap", text, re.M) and code[-1].source == "session.save()"
    assert not any(c.outputs or c.execution_count for c in code)
    monkeypatch.setenv("LONGCTX_OUT", str(tmp_path))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    results = json.loads((tmp_path / "results.json").read_text())["results"]
    assert 0 < results["after_over_before"] < 1  # checkpointing keeps fewer activations
    # its recipe is literal code, the config it ran
    from longctx import recipe

    written = recipe.written(text.split("In your own script", 1)[1].split("\n## ", 1)[0])
    assert recipe.drift(written["SFTConfig"], results["recipe"]["SFTConfig"]) == []
    assert re.search(r"\bSFTConfig\(", "\n".join(c.source for c in code))


def glossary_terms() -> set[str]:
    """What GLOSSARY.md defines: each entry's heading, split at commas and parentheses, and the terms its text puts in
    italics (an entry's other names, *gradient checkpointing* under activation checkpointing)."""
    text = (REPO / "GLOSSARY.md").read_text()
    names = [n for h in re.findall(r"^### (.+)$", text, re.M) for n in re.split(r"[,()]", h)]
    names += re.findall(r"(?<![*\w])\*([^*\n]+)\*(?!\*)", text)
    return {n.strip().strip("`").lower() for n in names if n.strip()}


def bold_terms(name) -> set[str]:
    """A lesson's bold spans that name a term: not a lead-in (which ends in punctuation) nor an exercise's number."""
    spans = re.findall(r"\*\*(.+?)\*\*", _markdown(name))
    return {s for s in spans if not re.search(r"[.,:;?!]$", s) and not s[0].isdigit()}


@pytest.mark.parametrize("name", harness.notebooks())
def test_every_term_a_lesson_bolds_is_in_the_glossary(name):
    defined = glossary_terms()

    def known(term):
        t = term.strip("`").lower()
        return t in defined or t.rstrip("s") in defined or f"{t}s" in defined

    assert not [t for t in bold_terms(name) if not known(t)], name
