"""The plotting module draws in the lessons' style without changing the reader's matplotlib settings."""

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")


def test_importing_plots_changes_no_matplotlib_setting():
    probe = ("import matplotlib as m; before = dict(m.rcParams); import longctx.plots; "
             "print(dict(m.rcParams) == before)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


def test_plots_draw_in_the_lessons_style_and_return_their_axes(tmp_path):
    import matplotlib.pyplot as plt

    from longctx import plots

    ax = plots.bars({"plain": 2.0, "chunked": 1.0}, ylabel="GiB")
    assert tuple(ax.figure.get_size_inches()) == plots.STYLE["figure.figsize"]
    assert not ax.spines["top"].get_visible()  # the style's, drawn inside the call
    assert plt.rcParams["axes.spines.top"]  # the reader's default, untouched outside it
    written = plots.save_figure(ax.figure, "bars", tmp_path)
    assert sorted(p.name for p in written) == ["bars.png", "bars.svg"]
