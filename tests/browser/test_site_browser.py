"""The static site in a real browser (its own target: `make site-check`; not part of `make test`, which checks the
site's links without a browser in tests/test_notebooks.py).

Headless Chromium (Debian's package, driven by Playwright) opens every page of the site from disk, as a reader
who double-clicks index.html would: every image has loaded with a non-zero size, no page shows a Python
traceback. Screenshots of the index and of one lesson are kept where SITE_SHOTS points (`make site-check`:
build/site-check/)."""

import os
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not os.environ.get("LONGCTX_SITE_CHECK"),
    reason="the browser check of the site runs with `make site-check` (LONGCTX_SITE_CHECK)",
)


@pytest.fixture
def site_folder(tmp_path):
    folder = Path(os.environ["LONGCTX_SITE_CHECK"]).resolve()
    if not (folder / "index.html").is_file():
        pytest.fail(f"No site at {folder}: build it with `longctx site` first (make site-check does).")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"No Chromium at {CHROMIUM}: apt-get install chromium (Debian), or set CHROMIUM=/path/to/it.")
    return folder


def test_every_page_renders_its_figures_and_no_traceback(site_folder, tmp_path):
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("SITE_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = sorted(p for p in site_folder.rglob("*.html") if p.name != "404.html")
    problems, figures = [], 0
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for html in pages:
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            images = page.evaluate("Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])")
            figures += len(images)
            problems += [
                f"{html.relative_to(site_folder)}: image {src[:80]} not rendered"
                for src, complete, width in images
                if not complete or width == 0
            ]
            if "Traceback (most recent call last)" in page.inner_text("body"):
                problems.append(f"{html.relative_to(site_folder)}: shows a Python traceback")
            if html.relative_to(site_folder).as_posix() in ("index.html", "lessons/01_chunked_loss.html"):
                page.screenshot(path=str(shots / f"{html.stem}.png"))
        browser.close()
    assert not problems, "\n".join(problems)
    assert figures > len(pages)  # the lessons' figures are there, not only the theme's logo


def test_the_calculator_page_shows_the_estimate_of_the_chosen_settings(site_folder):
    """Pick a model, a length, a plan step and a card as a reader would; the page shows that point of its data file."""
    import json

    from playwright.sync_api import sync_playwright

    text = (site_folder / "calculator" / "estimates.js").read_text()
    data = json.loads(text[text.index("=") + 1 :].strip().rstrip(";"))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((site_folder / "calculator" / "index.html").as_uri())
        shown = {}
        for model, length, step, card in (("qwen3-8b", 1048576, 6, "H100-80GB"), ("qwen3-0.6b", 4096, 0, "A100-40GB")):
            page.select_option("#calc-model", model)
            page.select_option("#calc-length", str(length))
            page.select_option("#calc-step", str(step))
            page.select_option("#calc-card", card)
            verdict = page.locator("#calc-verdict")
            shown[model] = (float(verdict.get_attribute("data-peak")), verdict.get_attribute("data-fits"), verdict.inner_text())
            expected = data["estimates"][model][step][data["lengths"].index(length)]
            assert shown[model][0] == expected["peak_gib"]
            assert shown[model][1] == str(expected["peak_gib"] <= data["cards"][card]).lower()
            assert f"{expected['peak_gib']:.2f} GiB per GPU" in shown[model][2]
            if expected["peak_gib"] <= data["cards"][card]:  # a fit says what the allocator's cache may add
                low = expected["peak_gib"] * (data["reserved_over_allocated"][0] - 1)
                assert f"the allocator's cache may want {low:.2f}" in shown[model][2]
            assert float(page.locator("#calc-time").get_attribute("data-seconds")) == expected["seconds"][card]
            assert "s per step" in page.locator("#calc-time").inner_text()
        assert page.locator("#calc-breakdown tbody tr").count() > 0
        browser.close()
