"""`longctx site`: a static HTML site of the lessons as they last ran, built with MkDocs (the Material theme)
and mkdocs-jupyter from what `make` / `longctx run` / `longctx figures` already wrote; nothing is executed.

Pages: the README as the landing page; one page per executed notebook (outputs and figures as the run
left them, with the size, library versions and finishing time of that run, a link to the notebook's source
and to the next lesson); a page naming the command for each lesson not executed at that size; the guide's
figures gallery when `longctx figures` wrote one. Pages are plain .html files that link to each other
relatively, so the site opens from disk (file://) as well as from any static web server."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from longctx import files
from longctx.errors import LongctxError, check_choice
from longctx.paths import REPO, build_dir

GLOSSARY = "GLOSSARY.md"  # at the top of the repository; the lessons link it as ../GLOSSARY.md


def runs_on_disk(size: str) -> dict[str, Path]:
    """notebook → its executed copy under build/<notebook>/, where results.json says it ran at `size`."""
    from longctx.run import harness

    found = {}
    for name in harness.notebooks():
        results = build_dir() / name / "results.json"
        executed = build_dir() / name / f"{name}.ipynb"
        try:
            ran_at = json.loads(results.read_text()).get("size") if results.is_file() else None
        except ValueError:
            ran_at = None
        if ran_at == size and executed.is_file():
            found[name] = executed
    return found


def build(
    size: str = "cpu",
    out: str | Path | None = None,
    *,
    runs: dict[str, Path] | None = None,
    figures: str | Path | None = None,
    progress: bool = True,
) -> Path:
    """Build the site for the runs at `size` (`runs`: notebook → executed .ipynb beside its results.json;
    default: what `longctx run` / `make` left in build/) into `out` (default build/site/<size>/), and return
    the folder. `figures`: the folder `longctx figures` wrote (default build/figures/<size>/, if present)."""
    from longctx.run import harness

    check_installed()
    check_choice("size", size, harness.SIZES)
    out = files.claim_folder(out or build_dir() / "site" / size, "site", write=False)  # new, empty, or a site
    runs = runs_on_disk(size) if runs is None else {k: Path(v) for k, v in runs.items()}
    figures = Path(figures) if figures else build_dir() / "figures" / size
    with tempfile.TemporaryDirectory(prefix="longctx-site-") as tmp:
        docs, site = Path(tmp) / "docs", Path(tmp) / "site"
        nav = _write_docs(docs, size, runs, figures)
        config = Path(tmp) / "mkdocs.yml"
        config.write_text(json.dumps(_config(size, docs, site, nav), indent=2))  # YAML reads JSON
        _mkdocs_build(config, progress)
        problems = broken_links(site)
        if problems:
            raise LongctxError("The site has broken links or images:\n  " + "\n  ".join(problems[:20]))
        # copied over the last build: its pages are replaced, a file the user added there is kept
        shutil.copytree(site, files.claim_folder(out, "site"), dirs_exist_ok=True)
    return out


def check_installed() -> None:
    import importlib.util

    missing = [m for m in ("mkdocs", "material", "mkdocs_jupyter") if importlib.util.find_spec(m) is None]
    if missing:
        raise LongctxError(
            f"The site needs MkDocs, its Material theme and mkdocs-jupyter ({', '.join(missing)} "
            "missing): pip install -e '.[site]' (or `make site`)."
        )


def _write_docs(docs: Path, size: str, runs: dict[str, Path], figures: Path) -> list:
    from longctx.run import harness

    names = list(harness.notebooks())
    (docs / "lessons").mkdir(parents=True)
    (docs / "source").mkdir()
    pages = {name: f"lessons/{name}.ipynb" if name in runs else f"lessons/{name}.md" for name in names}
    lessons = []
    for i, name in enumerate(names):
        shutil.copyfile(harness.notebooks()[name], docs / "source" / f"{name}.ipynb")  # as committed, no outputs
        following = pages[names[i + 1]] if i + 1 < len(names) else None
        if name in runs:
            _lesson_page(runs[name], docs / pages[name], name, size, following)
        else:
            (docs / pages[name]).write_text(_missing_page(name, size, following))
        lessons.append({name: pages[name]})
    gallery = _gallery(docs / "figures", figures, size)
    shutil.copyfile(REPO / GLOSSARY, docs / GLOSSARY)
    readme = (REPO / "README.md").read_text()
    status = "\n".join(
        f"| [{name}]({next(iter(lessons[i].values()))}) | "
        f"{'executed at `' + size + '`' if name in runs else 'not executed at `' + size + '`'} |"
        for i, name in enumerate(names)
    )
    (docs / "index.md").write_text(
        f'!!! note "This site"\n    The lessons as they last ran at the `{size}` size, built by '
        f"`longctx site --size {size}` from the executed notebooks; nothing was run to build it.\n\n"
        f"| lesson | on this site |\n| --- | --- |\n{status}\n\n"
        f"The guide's figures: [gallery]({gallery}).\n\n---\n\n" + readme
    )
    return [{"Home": "index.md"}, {"Lessons": lessons}, {"Figures": gallery}, {"Glossary": GLOSSARY}]


def _lesson_page(executed: Path, page: Path, name: str, size: str, following: str | None) -> None:
    """The executed notebook with a cell on top naming its run, and a link to the next lesson at the end (plain
    Markdown: nbconvert renders notebook cells, not MkDocs)."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    results_path = executed.parent / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    versions = results.get("versions", {})
    finished = results.get("finished") or _mtime(results_path)
    about = (
        f"> **This run.** Size `{results.get('size', size)}`, finished {finished}"
        f"{', in %.0f s' % results['seconds'] if 'seconds' in results else ''}; "
        + ", ".join(f"{k} {versions[k]}" for k in sorted(versions))
        + ". "
        f"[Source notebook](../source/{name}.ipynb) (as committed, without outputs); run it yourself with "
        f"`longctx run {name[:2]} --size {size}`."
    )
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _built_links(cell.source)
    nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, nbformat.v4.new_markdown_cell(about))
    link = _next(following, built=True)
    if not following or f"]({Path(following).stem}.html)" not in "".join(c.source for c in nb.cells):
        nb.cells.append(nbformat.v4.new_markdown_cell(link))  # unless the lesson already links its successor
    nbformat.write(nb, page)


def _built_links(markdown: str) -> str:
    """A lesson's own links as its built page needs them: another lesson's notebook → that lesson's page,
    the glossary → its page (nbconvert renders notebook cells as written; MkDocs rewrites only .md pages)."""
    markdown = re.sub(r"\]\((\d\d_\w+)\.ipynb\)", r"](\1.html)", markdown)
    return markdown.replace(f"](../{GLOSSARY}", f"](../{Path(GLOSSARY).with_suffix('.html')}")


def _mtime(path: Path) -> str:
    """When a file was last written (UTC): the finishing time of a run that did not record one."""
    from datetime import datetime, timezone

    if not path.is_file():
        return "at an unrecorded time"
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")


def _missing_page(name: str, size: str, following: str | None) -> str:
    return (
        f'# {name}\n\n!!! warning "Not executed at the `{size}` size"\n    No executed copy of this lesson at '
        f"`{size}` was found in build/. Run it, then build the site again:\n\n"
        f"    ```bash\n    longctx run {name[:2]} --size {size}\n    longctx site --size {size}\n    ```\n\n"
        f"[Source notebook](../source/{name}.ipynb) (as committed, without outputs).\n\n{_next(following)}\n"
    )


def _next(following: str | None, built: bool = False) -> str:
    """The link to the next lesson's page (`following`: its file under docs/). A Markdown page links to the
    file, which MkDocs checks and rewrites; a notebook's cells are rendered as they are, so they name the
    built .html page."""

    def href(doc: str) -> str:
        name = Path(doc).name
        return str(Path(name).with_suffix(".html")) if built else name

    if following:
        return f"**Next:** [{Path(following).stem}]({href(following)})"
    return f"**Last lesson.** Back to the [index]({'../index.html' if built else '../index.md'})."


def _gallery(folder: Path, figures: Path, size: str) -> str:
    folder.mkdir()
    index = figures / "index.md"
    if index.is_file():
        for f in figures.iterdir():
            if f.is_file() and f.suffix in (".md", ".png", ".svg"):
                shutil.copyfile(f, folder / f.name)
    else:
        (folder / "index.md").write_text(
            f'# Guide figures\n\n!!! warning "Not generated at the `{size}` size"\n    `longctx figures --size {size}` '
            f"writes them into build/figures/{size}/; build the site again afterwards.\n"
        )
    return "figures/index.md"


def _config(size: str, docs: Path, site: Path, nav: list) -> dict:
    return {
        "site_name": f"longctx lessons ({size} run)",
        "docs_dir": str(docs),
        "site_dir": str(site),
        "use_directory_urls": False,  # pages are .html files: the site opens from disk
        "strict": True,  # a link MkDocs can check that points nowhere fails the build
        "theme": {"name": "material", "font": False},  # no web fonts: nothing is fetched from the network
        "markdown_extensions": ["admonition", "tables", "pymdownx.superfences"],
        # no conversion cache: mkdocs-jupyter would write it to .cache/ in whatever folder the command runs from
        "plugins": [
            {"mkdocs-jupyter": {"execute": False, "include": ["lessons/*.ipynb"], "include_source": True, "cache": False}}
        ],
        "nav": nav,
    }


def _mkdocs_build(config: Path, progress: bool) -> None:
    import logging

    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    level = logging.getLogger("mkdocs").level
    if not progress:
        logging.getLogger("mkdocs").setLevel(logging.ERROR)
    try:
        mkdocs_build(load_config(config_file=str(config)))
    except Exception as exc:  # MkDocs' own error types (Abort in strict mode, config errors)
        raise LongctxError(f"MkDocs could not build the site: {exc}") from None
    finally:
        logging.getLogger("mkdocs").setLevel(level)


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.found.append(value)


def broken_links(site: str | Path) -> list[str]:
    """Every relative link and image of every page of `site` that points at no file of the site (links to
    other sites are not followed: the check needs no network)."""
    site = Path(site)
    problems = []
    for page in sorted(site.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for link in parser.found:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:  # http(s):, data:, mailto:, or a #fragment
                continue
            path = unquote(parts.path)  # the 404 page links from the site's root ("/assets/..."), others relatively
            target = (site / path.lstrip("/") if path.startswith("/") else page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists() or site.resolve() not in target.parents:
                problems.append(f"{page.relative_to(site)}: {link}")
    return problems
