"""One plotting style for every lesson; `save_figure` is the only writer of figures. Each plotting function takes
the data a library function returned, draws on `ax=` (a new figure when None) and returns the axes, so a notebook
can compose panels."""

import contextlib
import functools
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from longctx.files import atomic
from longctx.paths import slug
from longctx.units import CATEGORIES, GIB, MIB

STYLE = {
    "figure.figsize": (7.5, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 120,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 10,
    "svg.hashsalt": "longctx",
    **dict.fromkeys(("axes.spines.top", "axes.spines.right", "legend.frameon", "path.simplify"), False),
}
# the memory categories' colours, and those of the series the lessons plot (train/eval, plain/chunked, …)
COLORS = {
    **dict.fromkeys(("parameters", "train", "chunked", "checkpointing"), "#4C72B0"),
    **dict.fromkeys(("gradients", "eval"), "#DD8452"),
    **dict.fromkeys(("optimizer", "offload", "yarn"), "#55A868"),
    **dict.fromkeys(("activations", "plain"), "#C44E52"),
    **{"buffers": "#8172B3", "temporaries": "#DA8BC3", "other": "#937860"},
}


@contextlib.contextmanager
def style():
    """STYLE's settings for the duration, then the reader's own back."""
    before = {key: plt.rcParams[key] for key in STYLE}
    plt.rcParams.update(STYLE)
    try:
        yield
    finally:
        plt.rcParams.update(before)


def axes(ax=None):
    """`ax`, or the axes of a new figure in the lessons' style."""
    if ax is None:
        with style():
            _, ax = plt.subplots()
    return ax


def panels(ncols: int, figsize: tuple[float, float]):
    """A figure of `ncols` axes side by side, in the lessons' style: (figure, axes)."""
    with style():
        return plt.subplots(1, ncols, figsize=figsize)


def styled(draw):
    """A plotting function drawn under STYLE on its `ax=` (a new figure's when None), returning the axes: importing
    this module changes no global matplotlib setting, and a reader's own rcParams apply outside these calls."""

    @functools.wraps(draw)
    def wrapper(*args, ax=None, **kwargs):
        with style():
            ax = axes(ax)
            draw(*args, ax=ax, **kwargs)
        return ax

    return wrapper


def save_figure(fig, name: str, folder: str | Path) -> list[Path]:
    """Write `name`.png and `name`.svg into `folder` (no timestamps, so identical inputs give identical files;
    a lesson writes through its session: `session.save_figure`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = slug(name)  # a figure named after a hub id or a path stays one file in this folder
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    with style():
        for path, metadata in zip(paths, ({"Software": None}, {"Date": None, "Creator": None})):
            with atomic(path) as tmp:  # a full disk leaves no truncated figure
                fig.savefig(tmp, format=path.suffix[1:], metadata=metadata, bbox_inches="tight")
    return paths


@styled
def budget_bars(budgets: dict[str, dict], ax=None):
    """Stacked bars of weights / gradients / optimizer per method (values in GB)."""
    names = list(budgets)
    bottom = np.zeros(len(names))
    for part, color in (("weights", "parameters"), ("gradients", "gradients"), ("optimizer", "optimizer")):
        vals = np.array([budgets[n][part] for n in names])
        ax.bar(names, vals, bottom=bottom, color=COLORS[color], label=part)
        bottom += vals
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.1f} GB", (i, total), ha="center", va="bottom")
    ax.set(ylabel="GB before activations")
    ax.legend()


@styled
def category_bars(rows: dict[str, dict[str, int]], ax=None):
    """Grouped bars comparing the fixed categories' byte counts (e.g. calculated vs measured), in MiB."""
    categories = ("parameters", "gradients", "optimizer")
    width, x = 0.8 / len(rows), np.arange(len(categories))
    for i, (name, row) in enumerate(rows.items()):
        ax.bar(x + i * width, [row.get(c, 0) / MIB for c in categories], width, label=name)
    ax.set_xticks(x + width * (len(rows) - 1) / 2, categories)
    ax.set(ylabel="MiB")
    ax.legend()


def profile_timelines(shown: dict, unit: float = GIB, capacity: float | None = None) -> dict:
    """One figure for each `name: (profile, title)`, drawn by profile_timeline on one y scale so their heights
    compare: the highest peak with a tenth of headroom, or the capacity line if higher. Each name's axes."""
    top = max(max(prof.peak_bytes for prof, _ in shown.values()) / unit * 1.1, (capacity or 0) * 1.05)
    drawn = {}
    for name, (prof, title) in shown.items():
        drawn[name] = profile_timeline(prof, unit=unit, title=title, capacity=capacity)
        drawn[name].set_ylim(0, top)
    return drawn


@styled
def profile_timeline(profile, ax=None, unit: float = GIB, title: str | None = None, capacity: float | None = None):
    """A step's live memory over time as stacked categories, phases shaded, the peak marked."""
    totals = profile.timeline.sum(axis=1)
    edges = np.linspace(0, len(totals), min(len(totals), 3000) + 1).astype(int)  # thinned, each bin's highest row kept
    t = np.array([a + int(totals[a:b].argmax()) for a, b in zip(edges[:-1], edges[1:]) if b > a], dtype=int)
    timeline, bands = profile.timeline[t], profile.bands[t] if profile.bands is not None else None
    bottom, fill = np.zeros(len(t)), functools.partial(ax.fill_between, t, lw=0, step="post")
    unit_name = {GIB: "GiB", MIB: "MiB"}.get(unit, "bytes")
    has_bands = bands is not None and profile.band_bytes and bands.any()
    for i, cat in enumerate(CATEGORIES):
        values, label, color = timeline[:, i].astype(float) / unit, cat, COLORS[cat]
        if not values.any():
            continue
        if cat == "activations" and has_bands:
            band = profile.band_bytes / unit
            for k in range(int(bands.max())):
                height = np.where(bands > k, band, 0.0)
                first = f"sequence × hidden activations (up to {int(bands.max())} at once)" if k == 0 else None
                fill(bottom, bottom + height, color=color, alpha=0.55 if k % 2 else 0.85, label=first)
                bottom = bottom + height
            values, label, color = np.clip(values - bands * band, 0, None), "other activations", "#E8A0A0"
        fill(bottom, bottom + values, color=color, label=label)
        bottom = bottom + values
    for phase, shade in (("backward", 0.06), ("optimizer", 0.14)):
        idx = np.flatnonzero(np.array(profile.phases) == phase)
        if len(idx):
            ax.axvspan(idx[0], idx[-1], color="k", alpha=shade, lw=0)
    peak, top = int(totals.argmax()), profile.peak_bytes / unit
    ax.axvline(peak, color="k", ls=":", lw=1)
    late = peak > 0.6 * len(totals)  # a late peak is labelled left of its line, clear of the legend beside the axes
    side = dict(ha="right", xytext=(-4, -10)) if late else dict(ha="left", xytext=(4, -10))
    ax.annotate(f"peak {top:.2f} {unit_name}", (peak, top), fontsize=8, textcoords="offset points", **side)
    ax.plot([peak], [top], "k.", ms=4)  # a one-operator spike is thinner than a pixel: the label's height, marked
    if capacity:
        ax.axhline(capacity, color="k", lw=1, ls="--", label=f"device capacity {capacity:.2f} {unit_name}")
    xlabel = "operator index in one training step (forward | backward, shaded | optimizer, darker)"
    ax.set(xlim=(0, len(totals) - 1), xlabel=xlabel, ylabel=unit_name, title=title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)  # beside the axes: the capacity line stays clear


@styled
def peak_vs_length(series: dict[str, tuple[list[int], list[float]]], ax=None, capacity=None, unit_label="GiB", guide=None):
    """Peak memory against sequence length, one line per run; an optional device-capacity line and
    the guide's reach marks (`guide`: {label: tokens})."""
    for name, (lengths, peaks) in series.items():
        ax.plot(lengths, peaks, "o-", ms=3, label=name, color=COLORS.get(name.split()[0]))
    if capacity:
        ax.axhline(capacity, color="k", lw=1, ls="--", label=f"{capacity:.2f} {unit_label} card")
    for name, length in (guide or {}).items():
        ax.axvline(length, color="grey", lw=0.8, ls=":")
        ax.annotate(name, (length, ax.get_ylim()[1]), rotation=90, va="top", ha="right", fontsize=7)
    ax.set(xlabel="sequence length (tokens)", ylabel=f"peak memory ({unit_label})")
    ax.legend()


@styled
def loss_curves(result, ax=None):
    """Training and validation loss against step; the validation minimum marked."""
    ax.plot(result.steps, result.losses, color=COLORS["train"], label="train loss", lw=1)
    if result.eval_steps:
        ax.plot(result.eval_steps, result.eval_losses, "o-", color=COLORS["eval"], label="validation loss", ms=3)
        i = int(np.argmin(result.eval_losses))
        step, loss = result.eval_steps[i], result.eval_losses[i]
        ax.plot(step, loss, "*", ms=14, color="k", label=f"best: step {step}, {loss:.3f}")
    ax.set(xlabel="optimizer step", ylabel="loss (nats/token)")
    ax.legend()


@styled
def bars(values: dict[str, float], ax=None, ylabel: str = "", annotate: str = "{:g}"):
    """One bar per entry, its value written on top."""
    ax.bar(list(values), list(values.values()), color=COLORS["parameters"])
    for i, value in enumerate(values.values()):
        ax.annotate(annotate.format(value), (i, value), ha="center", va="bottom", fontsize=8)
    ax.set(ylabel=ylabel)


@styled
def loss_along_sequence(curves: dict[str, np.ndarray], trained: int, ax=None, unigram=None, window: int = 32, title=None):
    """Per-token loss against position, one faint raw line and one smoothed line per curve, the end of
    the trained range marked, and the unigram entropy as a reference level."""
    from longctx.curves import smooth

    for name, curve in curves.items():
        positions = np.arange(1, len(curve) + 1)
        [raw] = ax.plot(positions, curve, lw=0.4, alpha=0.35, color=COLORS.get(name))  # (else the next colour)
        ax.plot(positions, smooth(curve, window), lw=1.6, color=raw.get_color(), label=f"{name} (smoothed)")
    _trained_mark(ax, trained)
    if unigram is not None:
        ax.axhline(unigram, color="grey", ls="--", lw=1, label=f"unigram entropy {unigram:.2f}")
    ax.set(xlabel="position in the sequence", ylabel="loss (nats per token)", title=title)
    _legend_beside(ax)


@styled
def difference_along_sequence(diff: np.ndarray, trained: int, ax=None, window: int = 32, label: str = "difference"):
    """A paired per-position difference (smoothed) around zero, the trained range marked."""
    from longctx.curves import smooth

    ax.plot(np.arange(1, len(diff) + 1), smooth(diff, window), color="k", lw=1.4, label=f"{label} (smoothed)")
    ax.axhline(0, color="grey", lw=0.8)
    _trained_mark(ax, trained)
    ax.set(xlabel="position in the sequence", ylabel=f"{label} (nats, smoothed)")
    _legend_beside(ax)


@styled
def yarn_pairs(rows: dict[str, tuple[np.ndarray, np.ndarray, float]], ax=None, title: str | None = None):
    """How YaRN treats each rotary pair: for each row `name: (turns, scaling, factor)`, the share of the pair's
    own frequency kept (1 = left alone, 0 = divided by the full factor) against the turns the pair makes
    inside the trained range (log scale)."""
    for name, (turns, scaling, factor) in rows.items():
        ax.plot(turns, (scaling - 1 / factor) / (1 - 1 / factor), marker="o", ms=3, lw=1.2, label=name)
    ax.set_xscale("log")
    ylabel = "frequency kept (1 = left alone, 0 = interpolated)"
    ax.set(xlabel="turns of the rotary pair inside the trained range", ylabel=ylabel, title=title)
    ax.legend(fontsize=7)


def _trained_mark(ax, trained: int) -> None:
    ax.axvline(trained, color="k", ls=":", lw=1, label=f"trained range ends ({trained:,})")


def _legend_beside(ax) -> None:
    """The legend right of the axes, where it hides no curve (the figure is saved tight around it)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)


# the time model's parts of a step (memory/timing.step_time's parts), in stacking order
TIME_COLORS = {
    "linear": "#4C72B0", "attention": "#C44E52", "recomputation": "#DD8452", "other": "#937860",
    "optimizer": "#55A868", "copies": "#8172B3", "communication": "#DA8BC3", "host": "#8C8C8C", "fixed": "#CCB974",
}  # fmt: skip


@styled
def time_breakdown(times: dict[str, dict], ax=None, title: str | None = None):
    """One horizontal bar per step (a label → memory/timing.step_time's dict): its seconds split into the time model's
    parts, the total written at the bar's end."""
    labels = list(times)
    left = np.zeros(len(labels))
    for part, color in TIME_COLORS.items():
        widths = np.array([times[k]["breakdown_seconds"][part] for k in labels])
        if widths.any():
            ax.barh(labels, widths, left=left, color=color, label=part)
            left += widths
    for y, total in enumerate(left):
        ax.annotate(f"{total:,.1f} s", (total, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step (the time model)")
    ax.set_xlim(0, left.max() * 1.15)
    ax.legend(fontsize=7, ncols=9, loc="upper center", bbox_to_anchor=(0.5, -0.3))
    if title:
        ax.set_title(title, fontsize=9)
    ax.figure.set_size_inches(ax.figure.get_size_inches()[0], 1.8 + 0.45 * len(labels))
    ax.figure.tight_layout()


@styled
def retrieval_heatmap(grid: np.ndarray, lengths, depths, trained: int | None = None, ax=None, title=None, intervals=None):
    """Pass-key accuracy (a row per depth, a column per length) as a heatmap with each cell's share written in it,
    under it its interval (`intervals[i][j]`: low, high) when given, and a dotted line after the last length inside
    the trained range."""
    ax.imshow(grid, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.grid(False)  # the cells are the grid
    for (i, j), share in np.ndenumerate(grid):
        text = f"{share:.2f}" + ("\n{:.2f}–{:.2f}".format(*intervals[i][j]) if intervals is not None else "")
        ax.text(j, i, text, ha="center", va="center", fontsize=6, color="w" if share < 0.6 else "k")
    ax.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
    ax.set(xlabel="document length (tokens)", ylabel="depth of the pass key", title=title)
    if trained is not None and (inside := sum(n <= trained for n in lengths)):
        ax.axvline(inside - 0.5, color="w", ls=":", lw=1.5)
