"""JupyterLab smoke test (its own target: `make lab-smoke`; not part of `make test`).

Starts JupyterLab headless on a copy of the notebooks, the way `longctx lab` starts it, opens one notebook
in a real headless Chromium (Debian's package, driven by Playwright), runs all cells from the Run menu as a
learner would, saves, and checks that every code cell ran, none raised, no library wrote to stderr (no red
output box) and no pop-up asked about Jupyter news. `make lab-smoke` keeps the screenshots in build/lab-smoke/.
"""

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = os.environ.get("LAB_SMOKE_NOTEBOOK", "01_chunked_loss.ipynb")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not os.environ.get("LONGCTX_LAB_SMOKE"), reason="the browser smoke test runs with `make lab-smoke` (LONGCTX_LAB_SMOKE=1)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"No Chromium at {CHROMIUM}: apt-get install chromium (Debian), or set CHROMIUM=/path/to/it.")
    root = tmp_path / "lab"
    shutil.copytree(REPO / "notebooks", root, ignore=shutil.ignore_patterns("params"))
    port, token = _free_port(), "longctx-smoke"
    env = dict(os.environ, LONGCTX_BUILD=str(tmp_path / "build"), JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter"))
    from longctx.tools import lab as longctx_lab

    longctx_lab.write_settings()  # what `longctx lab` does before it starts JupyterLab
    proc = subprocess.Popen(
        longctx_lab.command(
            root, "--no-browser", f"--port={port}", f"--IdentityProvider.token={token}", "--ServerApp.ip=127.0.0.1"
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "lab.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start: " + (tmp_path / "lab.log").read_text()[-2000:])
    yield url, token, root, tmp_path
    proc.terminate()
    proc.wait(timeout=30)


def test_notebook_runs_top_to_bottom_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    url, token, root, tmp = lab
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        page.click(".jp-Notebook .jp-Cell >> nth=0")
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_text("Run All Cells", exact=True).click()
        deadline = time.time() + 900
        time.sleep(3)
        while time.time() < deadline:  # the kernel indicator goes busy while cells run
            if (
                page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").count()
                and page.locator(".jp-InputArea-prompt:has-text('[*]')").count() == 0
            ):
                break
            time.sleep(2)
        page.keyboard.press("Control+s")
        time.sleep(3)
        shots = Path(os.environ.get("LAB_SMOKE_SHOTS") or tmp)  # `make lab-smoke`: build/lab-smoke/
        shots.mkdir(parents=True, exist_ok=True)
        page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{Path(NOTEBOOK).stem}-top.png"))
        figure = page.locator(".jp-OutputArea-output img").first
        figure.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"{Path(NOTEBOOK).stem}-first-figure.png"))
        red_boxes = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count()
        news = page.get_by_text("official Jupyter news").count()
        browser.close()
    assert red_boxes == 0, f"{red_boxes} stderr outputs on the page"
    assert news == 0, "JupyterLab asked about Jupyter news"
    nb = nbformat.read(root / NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"cells raised: {[(e.ename, e.evalue) for e in errors]}"
    stderr = ["".join(o.text) for c in code for o in c.outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, f"{len(stderr)} stderr outputs, the first: {stderr[0][:300]!r}"
    assert all(c.execution_count for c in code), "some code cells did not run"
    results = list((tmp / "build").glob("*/interactive/results.json"))
    assert results and json.loads(results[0].read_text())["results"]


def test_the_explore_widget_redraws_when_a_control_changes(lab):
    """`explore()` in a notebook: ticking "offload" redraws the figure under the controls (a display the change updates,
    not an Output widget) with the new estimate's title."""
    from playwright.sync_api import sync_playwright

    url, token, root, tmp = lab
    cell = 'from longctx.memory.explore import explore\n\nexplorer = explore("deep", 4096, models=())'
    kernel = nbformat.read(root / NOTEBOOK, as_version=4).metadata.kernelspec  # the lessons' kernel: no kernel dialog
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)], metadata={"kernelspec": kernel})
    nbformat.write(nb, root / "explore.ipynb")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/lab/tree/explore.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
        page.click(".jp-Notebook .jp-Cell >> nth=0")
        # from the Run menu, as the other test: a Shift+Enter sent as the page settles can add a cell without running one
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_text("Run All Cells", exact=True).click()
        first = page.locator(".jp-OutputArea-output img").first
        shots = Path(os.environ.get("LAB_SMOKE_SHOTS") or tmp)
        shots.mkdir(parents=True, exist_ok=True)
        try:
            first.wait_for(timeout=300_000)  # the first estimate drawn
        finally:
            page.screenshot(path=str(shots / "explore-widget-first.png"))
        before = first.get_attribute("src")
        page.get_by_role("checkbox", name="offload").check()
        page.wait_for_function(
            "src => { const i = document.querySelector('.jp-OutputArea-output img'); return i && i.src !== src; }",
            arg=before,
            timeout=300_000,
        )
        page.screenshot(path=str(shots / "explore-widget-offload.png"))
        browser.close()
