"""`longctx site`: a static HTML site of the lessons as they last ran (MkDocs, Material theme, mkdocs-jupyter), built
from what `longctx run` / `longctx figures` wrote; nothing is executed. Pages link to each other relatively, so the
site opens from disk (file://) as well as from any static web server."""

import importlib.util
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from longctx import files
from longctx.errors import LongctxError, check_choice
from longctx.paths import REPO, build_dir
from longctx.tools.figures import GUIDE_FIGURES

GLOSSARY = "GLOSSARY.md"  # at the top of the repository; the lessons link it as ../GLOSSARY.md
CALCULATOR = REPO / "calculator"  # the memory calculator page, its script and its data (scripts/calculator_data.py)


def build(size="cpu", out: str | Path | None = None, *, runs: dict | None = None, figures=None, progress=True) -> Path:
    """Build the site of the runs at `size` into `out` (default build/site/<size>/); `runs` (notebook → executed .ipynb)
    and `figures` (a folder) replace what build/ holds."""
    from longctx.run import harness

    if missing := [m for m in ("mkdocs", "material", "mkdocs_jupyter") if importlib.util.find_spec(m) is None]:
        raise LongctxError(
            f"The site needs MkDocs, its Material theme and mkdocs-jupyter ({', '.join(missing)} "
            "missing): pip install -e '.[site]' (or `make site`)."
        )
    check_choice("size", size, harness.SIZES)
    out = files.claim(build_dir() / "site" / size if out is None else out, "site", write=False)  # new, empty, or a site
    if runs is None:  # the runs at this size that `longctx run` marked as its own (anything else there is not shown)
        folders = {name: build_dir() / name for name in harness.notebooks()}
        runs = {
            name: folder / f"{name}.ipynb"
            for name, folder in folders.items()
            if files.claimed(folder, "run") and (files.json_object(folder / "results.json") or {}).get("size") == size
        }
    with files.staging(out) as tmp:  # built in a fresh folder beside `out`, then swapped in whole (files.swap_in)
        docs, site = Path(tmp) / "docs", Path(tmp) / "site"
        nav = _write_docs(docs, size, runs, Path(figures) if figures else build_dir() / "figures" / size)
        _mkdocs(docs, site, size, nav, progress)
        if problems := broken_links(site):
            raise LongctxError("The site has broken links or images:\n  " + "\n  ".join(problems[:20]))
        files.swap_in(site, out, "site")
    return out


def _mkdocs(docs: Path, site: Path, size: str, nav: list, progress: bool) -> None:
    import logging

    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    config = {
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
    (docs.parent / "mkdocs.yml").write_text(json.dumps(config, indent=2))  # YAML reads JSON
    logger = logging.getLogger("mkdocs")
    level = logger.level
    logger.setLevel(level if progress else logging.ERROR)
    try:
        mkdocs_build(load_config(config_file=str(docs.parent / "mkdocs.yml")))
    finally:
        logger.setLevel(level)


def _write_docs(docs: Path, size: str, runs: dict[str, Path], figures: Path) -> list:
    from longctx.run import harness

    names = list(harness.notebooks())
    for folder in ("lessons", "source", "figures"):
        (docs / folder).mkdir(parents=True)
    pages = {name: f"lessons/{name}.ipynb" if name in runs else f"lessons/{name}.md" for name in names}
    for name, following in zip(names, [*names[1:], None]):
        shutil.copyfile(harness.notebooks()[name], docs / "source" / f"{name}.ipynb")  # as committed, no outputs
        following = following and pages[following]
        if name in runs:
            _lesson_page(runs[name], docs / pages[name], name, following)
        else:
            (docs / pages[name]).write_text(
                f'# {name}\n\n!!! warning "Not executed at the `{size}` size"\n    No executed copy of this lesson '
                f"at `{size}` was found in build/. Run it, then build the site again:\n\n    ```bash\n    longctx "
                f"run {name[:2]} --size {size}\n    longctx site --size {size}\n    ```\n\n[Source notebook]"
                f"(../source/{name}.ipynb) (as committed, without outputs).\n\n{_next(following)}\n"
            )
    if files.claimed(figures, "figures"):  # the figures `longctx figures` wrote, under an index of ours
        lines = [f"# Guide figures ({size} size)\n\nAs `longctx figures --size {size}` last drew them.\n"]
        for name, nb in GUIDE_FIGURES.items():
            for f in (figures / f"{name}.png", figures / f"{name}.svg"):
                shutil.copyfile(f, docs / "figures" / f.name)
            lines.append(f"## {name}\n\n![{name}]({name}.png)\n\nFrom lesson `{nb}` ([SVG]({name}.svg)).\n")
        (docs / "figures" / "index.md").write_text("\n".join(lines))
    else:
        (docs / "figures" / "index.md").write_text(
            f'# Guide figures\n\n!!! warning "Not generated at the `{size}` size"\n    `longctx figures --size {size}` '
            f"writes them into build/figures/{size}/; build the site again afterwards.\n"
        )
    shutil.copyfile(REPO / GLOSSARY, docs / GLOSSARY)
    shutil.copytree(CALCULATOR, docs / "calculator")
    status = "\n".join(f"| [{name}]({pages[name]}) | {'' if name in runs else 'not '}executed at `{size}` |" for name in names)
    (docs / "index.md").write_text(
        f'!!! note "This site"\n    The lessons as they last ran at the `{size}` size, built by '
        f"`longctx site --size {size}` from the executed notebooks; nothing was run to build it.\n\n"
        f"| lesson | on this site |\n| --- | --- |\n{status}\n\n"
        "The guide's figures: [gallery](figures/index.md). Peak memory per GPU for the presets: "
        "[calculator](calculator/index.md).\n\n---\n\n" + (REPO / "README.md").read_text()
    )
    lessons = [{name: pages[name]} for name in names]
    nav = [{"Home": "index.md"}, {"Lessons": lessons}, {"Figures": "figures/index.md"}]
    return nav + [{"Calculator": "calculator/index.md"}, {"Glossary": GLOSSARY}]


def _lesson_page(executed: Path, page: Path, name: str, following: str | None) -> None:
    """The executed notebook with a cell on top naming its run and a link to the next lesson at the end. nbconvert
    renders its cells as written (MkDocs rewrites only .md pages): links to a notebook or the glossary are made .html."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    results = files.json_object(executed.parent / "results.json")
    versions = ", ".join(f"{k} {v}" for k, v in sorted(results["versions"].items()))
    size, finished = results["size"], results["finished"]
    edited = {
        True: " **This run's lesson differs from the lesson as committed** (an edited copy): its text and numbers are "
        "that copy's.",
        False: "",
        None: " Whether its lesson was the one committed was not recorded.",
    }[results.get("lesson_edited")]
    about = (
        f"> **This run.** Size `{size}`, finished `{finished}`, in {results['seconds']:.0f} s; "
        f"`{versions}`. [Source notebook](../source/{name}.ipynb) (as committed, without outputs); run it yourself "
        f"with `longctx run {name[:2]} --size {size}`.{edited}"
    )
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = re.sub(r"\]\((\d\d_\w+)\.ipynb\)", r"](\1.html)", cell.source)
            cell.source = cell.source.replace(f"](../{GLOSSARY}", f"](../{Path(GLOSSARY).stem}.html")
    nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, nbformat.v4.new_markdown_cell(about))
    if not following or f"]({Path(following).stem}.html)" not in "".join(c.source for c in nb.cells):
        nb.cells.append(nbformat.v4.new_markdown_cell(_next(following, built=True)))  # unless the lesson links it
    nbformat.write(nb, page)


def _next(following: str | None, built: bool = False) -> str:
    """The link to the next lesson (`following`: its file under docs/), which MkDocs checks and rewrites in a Markdown
    page; a notebook's cells name the built .html page."""
    if following:
        return f"**Next:** [{Path(following).stem}]({Path(following).stem + '.html' if built else Path(following).name})"
    return f"**Last lesson.** Back to the [index]({'../index.html' if built else '../index.md'})."


def broken_links(site: str | Path) -> list[str]:
    """Every relative link and image of every page of `site` that points at no file of the site (links to
    other sites are not followed: the check needs no network)."""
    site, problems = Path(site), []
    for page in sorted(site.rglob("*.html")):
        parser, found = HTMLParser(), []
        parser.handle_starttag = lambda tag, attrs: found.extend(v for k, v in attrs if k in ("href", "src") and v)
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for link in found:
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
