"""Why lesson 06's explorer draws into a display, not an ipywidgets Output widget: cells per second under nbclient,
measured in one run for both ways of redrawing a figure, two notebooks at once beside a busy loop (as under
`make test`'s two workers on two cores).

nbclient 0.11 stands in for a front end's Output widget and sends the widget's state back over the shell channel
while it waits there for the cell's reply (jupyter/nbclient#312, open). Under load a cell's reply can then wait until
the cell's timeout; the harness's own limit then stops the run. The same figures redrawn through a display handle
send nothing back.

Run: .venv/bin/python benchmarks/widget_stall.py [--cells 60] [--seconds 120]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

SETUP = "import ipywidgets as w\nimport matplotlib.pyplot as plt\nfrom IPython.display import DisplayHandle, display"
REDRAW = {  # three redraws of one small figure per cell, as the explorer redraws its figure on a change
    "Output widget": (
        "out = w.Output()\ndisplay(w.VBox([w.Dropdown(options=[1, 2]), out]))\nfor _ in range(3):\n    with out:\n"
        "        out.clear_output(wait=True)\n        fig, ax = plt.subplots()\n        ax.plot([1, 2, 3])\n"
        "        display(fig)\n        plt.close(fig)"
    ),
    "display handle": (
        "display(w.VBox([w.Dropdown(options=[1, 2])]))\nshown = DisplayHandle()\nfor i in range(3):\n"
        "    fig, ax = plt.subplots()\n    ax.plot([1, 2, 3])\n    (shown.update if i else shown.display)(fig)\n"
        "    plt.close(fig)"
    ),
}
CHILD = """
import sys, time, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], 4)
done, start = [], time.time()
client = NotebookClient(nb, timeout=int(sys.argv[2]), kernel_name="python3", on_cell_executed=lambda **kw: done.append(0))
try:
    client.execute()
finally:
    print(len(done) - 1, round(time.time() - start, 1))
"""


def measure(code: str, cells: int, seconds: int, folder: Path) -> list[tuple[int, float]]:
    """(cells executed, seconds) of two notebooks of `cells` cells run at once beside a busy loop, each stopped after
    `seconds`."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(SETUP)] + [nbformat.v4.new_code_cell(code) for _ in range(cells)]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path := folder / "stall.ipynb")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        runs = [
            subprocess.Popen(
                ["timeout", "-s", "INT", str(seconds), sys.executable, "-c", CHILD, str(path), str(seconds)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=folder,
            )  # fmt: skip
            for _ in range(2)
        ]
        said = [run.communicate()[0].split() for run in runs]
    finally:
        busy.kill()
    return [(int(s[0]), float(s[1])) if len(s) == 2 else (0, float(seconds)) for s in said]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=60)
    ap.add_argument("--seconds", type=int, default=120)
    args = ap.parse_args()
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in REDRAW.items():
            started = time.time()
            runs = measure(code, args.cells, args.seconds, Path(tmp))
            rates[name] = sum(n for n, _ in runs) / sum(s for _, s in runs)
            shown = ", ".join(f"{n} of {args.cells} cells in {s:.0f} s" for n, s in runs)
            print(f"{name}: {shown} ({time.time() - started:.0f} s)")
    print(f"cells per second, display handle / Output widget: {rates['display handle'] / max(rates['Output widget'], 1e-9):.1f}×")


if __name__ == "__main__":
    main()
