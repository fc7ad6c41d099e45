"""One plotting style for every lesson; `save_figure` is the only writer of figures.

Each plotting function takes the data a library function returned, draws on `ax=` (a new figure when
None) and returns the axes, so a notebook can compose panels.
"""

from __future__ import annotations

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
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "legend.frameon": False,
    "svg.hashsalt": "longctx",
    "path.simplify": False,
}
COLORS = {
    "parameters": "#4C72B0",
    "buffers": "#8172B3",
    "gradients": "#DD8452",
    "optimizer": "#55A868",
    "activations": "#C44E52",
    "temporaries": "#DA8BC3",
    "other": "#937860",
    "train": "#4C72B0",
    "eval": "#DD8452",
    "plain": "#C44E52",
    "chunked": "#4C72B0",
    "checkpointing": "#4C72B0",
    "offload": "#55A868",
    "yarn": "#55A868",
}


@contextlib.contextmanager
def style():
    """STYLE's settings for the duration, then the reader's own back. Only STYLE's keys are put back:
    `plt.rc_context` would restore every setting, among them `interactive`, which the notebook's inline
    backend turns on when the first figure of a kernel is made, and later figures would no longer show."""
    before = {key: plt.rcParams[key] for key in STYLE}
    plt.rcParams.update(STYLE)
    try:
        yield
    finally:
        plt.rcParams.update(before)


def styled(draw):
    """A plotting function drawn (and a figure saved) under STYLE: importing this module changes no global
    matplotlib setting, and a reader's own rcParams apply outside these calls."""

    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with style():
            return draw(*args, **kwargs)

    return wrapper


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


@styled
def save_figure(fig, name: str, folder: str | Path) -> list[Path]:
    """Write `name`.png and `name`.svg into `folder` (no timestamps, so identical inputs give identical files;
    a lesson writes through its session: `session.save_figure`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = slug(name)  # a figure named after a hub id or a path stays one file in this folder
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path, metadata in zip(paths, ({"Software": None}, {"Date": None, "Creator": None})):
        with atomic(path) as tmp:  # a full disk leaves no truncated figure
            fig.savefig(tmp, format=path.suffix[1:], metadata=metadata, bbox_inches="tight")
    return paths


@styled
def budget_bars(budgets: dict[str, dict], ax=None, unit: str = "GB"):
    """Stacked bars of weights / gradients / optimizer per method (values already in `unit`)."""
    ax = axes(ax)
    names = list(budgets)
    bottom = np.zeros(len(names))
    for part, color in (
        ("weights", COLORS["parameters"]),
        ("gradients", COLORS["gradients"]),
        ("optimizer", COLORS["optimizer"]),
    ):
        vals = np.array([budgets[n][part] for n in names])
        ax.bar(names, vals, bottom=bottom, color=color, label=part)
        bottom += vals
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.1f} {unit}", (i, total), ha="center", va="bottom")
    ax.set_ylabel(f"{unit} before activations")
    ax.legend()
    return ax


@styled
def category_bars(rows: dict[str, dict[str, int]], ax=None, categories=("parameters", "gradients", "optimizer")):
    """Grouped bars comparing byte counts per category (e.g. calculated vs measured), in MiB."""
    ax = axes(ax)
    names = list(rows)
    width = 0.8 / len(names)
    x = np.arange(len(categories))
    for i, name in enumerate(names):
        ax.bar(x + i * width, [rows[name].get(c, 0) / MIB for c in categories], width, label=name)
    ax.set_xticks(x + width * (len(names) - 1) / 2, categories)
    ax.set_ylabel("MiB")
    ax.legend()
    return ax


@styled
def profile_timeline(profile, ax=None, unit: float = GIB, title: str | None = None, capacity: float | None = None):
    """A step's live memory over time as stacked categories, phases shaded, the peak marked.

    Where the profile counts decoder layers' saved inputs (`bands`), each one is drawn as its own thin
    band inside the activations, as in the guide's figures: they stack up through the forward pass and
    drain through the backward pass."""
    ax = axes(ax)
    rows = _peak_preserving_rows(profile.timeline.sum(axis=1))
    timeline, bands = profile.timeline[rows], profile.bands[rows] if profile.bands is not None else None
    t = rows
    cols = {c: timeline[:, i].astype(float) / unit for i, c in enumerate(CATEGORIES)}
    bottom = np.zeros(len(t))
    has_bands = bands is not None and profile.band_bytes and bands.any()
    for cat in CATEGORIES:
        values = cols[cat]
        if not values.any():
            continue
        if cat == "activations" and has_bands:
            band = profile.band_bytes / unit
            for k in range(int(bands.max())):
                height = np.where(bands > k, band, 0.0)
                ax.fill_between(
                    t,
                    bottom,
                    bottom + height,
                    color=COLORS[cat],
                    alpha=0.55 if k % 2 else 0.85,
                    lw=0,
                    label=f"saved layer inputs (max {int(bands.max())})" if k == 0 else None,
                    step="post",
                )
                bottom = bottom + height
            values = np.clip(values - bands * band, 0, None)
            label = "other activations"
        else:
            label = cat
        ax.fill_between(
            t,
            bottom,
            bottom + values,
            color=COLORS[cat] if cat != "activations" or not has_bands else "#E8A0A0",
            lw=0,
            label=label,
            step="post",
        )
        bottom = bottom + values
    phases = np.array(profile.phases)
    for phase, shade in (("backward", 0.06), ("optimizer", 0.14)):
        idx = np.flatnonzero(phases == phase)
        if len(idx):
            ax.axvspan(idx[0], idx[-1], color="k", alpha=shade, lw=0)
    peak = int(profile.timeline.sum(axis=1).argmax())
    ax.axvline(peak, color="k", ls=":", lw=1)
    ax.annotate(
        f"peak {profile.peak_bytes / unit:.2f}",
        (peak, profile.peak_bytes / unit),
        fontsize=8,
        xytext=(4, -10),
        textcoords="offset points",
    )
    if capacity:
        ax.axhline(capacity, color="k", lw=1, ls="--", label=f"device capacity {capacity:g}")
    ax.set_xlabel("operator index in one training step (forward | backward, shaded | optimizer, darker)")
    ax.set_ylabel({GIB: "GiB", MIB: "MiB"}.get(unit, "bytes"))
    ax.set_xlim(0, len(profile.timeline) - 1)
    ax.legend(loc="upper left", fontsize=7)
    if title:
        ax.set_title(title)
    return ax


def _peak_preserving_rows(totals: np.ndarray, points: int = 3000) -> np.ndarray:
    """Indices that keep each bin's highest row (so a thinned timeline keeps its peaks)."""
    if len(totals) <= points:
        return np.arange(len(totals))
    edges = np.linspace(0, len(totals), points + 1).astype(int)
    return np.array([a + int(totals[a:b].argmax()) for a, b in zip(edges[:-1], edges[1:]) if b > a])


@styled
def peak_vs_length(
    series: dict[str, tuple[list[int], list[float]]],
    ax=None,
    capacity: float | None = None,
    unit_label: str = "GiB",
    guide: dict[str, float] | None = None,
):
    """Peak memory against sequence length, one line per run; an optional device-capacity line and
    the guide's reach marks."""
    ax = axes(ax)
    for name, (lengths, peaks) in series.items():
        ax.plot(lengths, peaks, "o-", ms=3, label=name, color=COLORS.get(name.split()[0]))
    if capacity:
        ax.axhline(capacity, color="k", lw=1, ls="--", label=f"{capacity:g} {unit_label} card")
    for name, length in (guide or {}).items():
        ax.axvline(length, color="grey", lw=0.8, ls=":")
        ax.annotate(name, (length, ax.get_ylim()[1]), rotation=90, va="top", ha="right", fontsize=7)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel(f"peak memory ({unit_label})")
    ax.legend()
    return ax


@styled
def loss_curves(result, ax=None, mark_best: bool = True):
    """Training and validation loss against step; the validation minimum marked."""
    ax = axes(ax)
    ax.plot(result.steps, result.losses, color=COLORS["train"], label="train loss", lw=1)
    if result.eval_steps:
        ax.plot(result.eval_steps, result.eval_losses, "o-", color=COLORS["eval"], label="validation loss", ms=3)
        if mark_best:
            i = int(np.argmin(result.eval_losses))
            ax.plot(
                result.eval_steps[i],
                result.eval_losses[i],
                "*",
                ms=14,
                color="k",
                label=f"best: step {result.eval_steps[i]}, {result.eval_losses[i]:.3f}",
            )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats/token)")
    ax.legend()
    return ax


@styled
def bars(values: dict[str, float], ax=None, ylabel: str = "", annotate: str = "{:g}", color: str | None = None):
    """One bar per entry, its value written on top."""
    ax = axes(ax)
    names = list(values)
    ax.bar(names, [values[n] for n in names], color=color or COLORS["parameters"])
    for i, n in enumerate(names):
        ax.annotate(annotate.format(values[n]), (i, values[n]), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel(ylabel)
    return ax


@styled
def loss_along_sequence(
    curves: dict[str, np.ndarray], trained: int, ax=None, unigram: float | None = None, window: int = 32, title: str | None = None
):
    """Per-token loss against position, one faint raw line and one smoothed line per curve, the end of
    the trained range marked, and the unigram entropy as a reference level."""
    from longctx.curves import smooth

    ax = axes(ax)
    for name, curve in curves.items():
        positions = np.arange(1, len(curve) + 1)
        color = COLORS.get(name)
        ax.plot(positions, curve, lw=0.4, alpha=0.35, color=color)
        ax.plot(positions, smooth(curve, window), lw=1.6, color=color, label=f"{name} (smoothed)")
    _trained_mark(ax, trained)
    if unigram is not None:
        ax.axhline(unigram, color="grey", ls="--", lw=1, label=f"unigram entropy {unigram:.2f}")
    ax.set_xlabel("position in the sequence")
    ax.set_ylabel("loss (nats per token)")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return ax


@styled
def difference_along_sequence(diff: np.ndarray, trained: int, ax=None, window: int = 32, label: str = "difference"):
    """A paired per-position difference (smoothed) around zero, the trained range marked."""
    from longctx.curves import smooth

    ax = axes(ax)
    ax.plot(np.arange(1, len(diff) + 1), smooth(diff, window), color="k", lw=1.4)
    ax.axhline(0, color="grey", lw=0.8)
    _trained_mark(ax, trained)
    ax.set_xlabel("position in the sequence")
    ax.set_ylabel(f"{label} (nats, smoothed)")
    return ax


@styled
def yarn_pairs(rows: dict[str, tuple[np.ndarray, np.ndarray, float]], ax=None, title: str | None = None):
    """How YaRN treats each rotary pair: for each row `name: (turns, scaling, factor)`, the share of the pair's
    own frequency kept (1 = left alone, 0 = divided by the full factor) against the turns the pair makes
    inside the trained range (log scale)."""
    ax = axes(ax)
    for name, (turns, scaling, factor) in rows.items():
        kept = (scaling - 1 / factor) / (1 - 1 / factor)
        ax.plot(turns, kept, marker="o", ms=3, lw=1.2, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("turns of the rotary pair inside the trained range")
    ax.set_ylabel("frequency kept (1 = left alone, 0 = interpolated)")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return ax


def _trained_mark(ax, trained: int) -> None:
    ax.axvline(trained, color="k", ls=":", lw=1)
    ax.annotate(
        "trained range ends", (trained, 1), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=7
    )
