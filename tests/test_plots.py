"""The plotting module draws in the lessons' style without changing the reader's matplotlib settings."""

import subprocess
import sys

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from longctx import plots
from longctx.memory.profile import MemoryProfile
from longctx.units import CATEGORIES, GIB

matplotlib.use("Agg")


def test_importing_plots_changes_no_matplotlib_setting():
    probe = "import matplotlib as m; before = dict(m.rcParams); import longctx.plots; print(dict(m.rcParams) == before)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


def test_plots_draw_in_the_lessons_style_and_return_their_axes(tmp_path):
    ax = plots.bars({"plain": 2.0, "chunked": 1.0}, ylabel="GiB")
    assert tuple(ax.figure.get_size_inches()) == plots.STYLE["figure.figsize"]
    assert not ax.spines["top"].get_visible()  # the style's, drawn inside the call
    assert plt.rcParams["axes.spines.top"]  # the reader's default, untouched outside it
    written = plots.save_figure(ax.figure, "bars", tmp_path)
    assert sorted(p.name for p in written) == ["bars.png", "bars.svg"]


def test_a_setting_the_backend_changes_during_a_plot_survives_it(monkeypatch):
    """The inline backend turns `interactive` on when a kernel's first figure is made; put back to off, every
    later figure of the notebook would silently not show."""

    subplots = plt.subplots

    def activating(*args, **kwargs):
        matplotlib.interactive(True)  # what IPython's inline backend does on first use
        return subplots(*args, **kwargs)

    matplotlib.interactive(False)
    monkeypatch.setattr(plt, "subplots", activating)
    try:
        plots.bars({"a": 1.0})
        assert matplotlib.is_interactive()
    finally:
        matplotlib.interactive(False)


def test_a_figure_named_after_a_hub_id_or_a_path_is_one_file_in_its_folder(tmp_path):
    fig = plt.figure()
    paths = plots.save_figure(fig, "one_million_rank_Qwen/Qwen3-8B_cp8", tmp_path)
    plt.close(fig)
    assert [p.name for p in paths] == ["one_million_rank_Qwen_Qwen3-8B_cp8.png", "one_million_rank_Qwen_Qwen3-8B_cp8.svg"]
    assert all(p.parent == tmp_path and p.is_file() for p in paths)


def test_a_timeline_names_its_bands_for_what_they_count_and_its_capacity_in_its_unit():
    """The band counter counts every sequence × hidden activation, not only checkpointed layer inputs; a card's
    capacity is a driver total such as 79.6475 GiB, shown to two places with its unit."""

    timeline = np.zeros((4, len(CATEGORIES)), dtype=np.int64)
    timeline[:, CATEGORIES.index("activations")] = [1, 3, 2, 0]
    timeline *= GIB
    profile = MemoryProfile(
        "cpu", "test", timeline, ["forward", "forward", "backward", "optimizer"], 3 * GIB, "forward", {},
        band_bytes=GIB, bands=np.array([1, 3, 2, 0]),
    )  # fmt: skip
    ax = plots.profile_timeline(profile, capacity=79.6475)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(ax.figure)
    assert "sequence × hidden activations (up to 3 at once)" in labels
    assert "device capacity 79.65 GiB" in labels
    assert not any("layer inputs" in label for label in labels)


def test_the_per_token_curves_keep_their_legend_and_the_trained_mark_off_the_curves():
    """Lesson 02's figures: the legend sits beside the axes (it hid the unigram line and the curves' ends), and the
    end of the trained range is a legend entry, not text written over the curves."""

    curve = np.linspace(4, 6, 512)
    for ax in (
        plots.loss_along_sequence({"plain": curve, "yarn": curve - 0.2}, 128, unigram=5.5, window=8),
        plots.difference_along_sequence(-0.2 * np.ones(512), 128, window=8, label="YaRN − plain loss"),
    ):
        legend = ax.get_legend()
        ax.figure.canvas.draw()
        inside = ax.get_window_extent().overlaps(legend.get_window_extent())
        labels = [t.get_text() for t in legend.get_texts()]
        plt.close(ax.figure)
        assert not inside and "trained range ends (128)" in labels and not ax.texts
