"""One plotting style for every lesson; `save_figure` is the only writer of figures.

Each plotting function takes the data a library function returned, draws on `ax=` (a new figure when
None) and returns the axes, so a notebook can compose panels.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from .memory.profile import CATEGORIES, GIB

STYLE = {
    "figure.figsize": (7.5, 4.0), "figure.dpi": 100, "savefig.dpi": 120, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "font.size": 10, "legend.frameon": False,
    "svg.hashsalt": "longctx", "path.simplify": False,
}
COLORS = {
    "parameters": "#4C72B0", "buffers": "#8172B3", "gradients": "#DD8452", "optimizer": "#55A868",
    "activations": "#C44E52", "temporaries": "#DA8BC3", "other": "#937860",
    "train": "#4C72B0", "eval": "#DD8452", "plain": "#C44E52", "chunked": "#4C72B0",
}
plt.rcParams.update(STYLE)


def _axes(ax):
    if ax is None:
        _, ax = plt.subplots()
    return ax


def save_figure(fig, name: str, folder: str | Path | None = None) -> list[Path]:
    """Write `name`.png and `name`.svg (no timestamps, so identical inputs give identical files)."""
    folder = Path(folder or os.environ.get("LONGCTX_FIGURES") or "figures")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    fig.savefig(paths[0], metadata={"Software": None}, bbox_inches="tight")
    fig.savefig(paths[1], metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    return paths


def budget_bars(budgets: dict[str, dict], ax=None, unit: str = "GB"):
    """Stacked bars of weights / gradients / optimizer per method (values already in `unit`)."""
    ax = _axes(ax)
    names = list(budgets)
    bottom = np.zeros(len(names))
    for part, color in (("weights", COLORS["parameters"]), ("gradients", COLORS["gradients"]),
                        ("optimizer", COLORS["optimizer"])):
        vals = np.array([budgets[n][part] for n in names])
        ax.bar(names, vals, bottom=bottom, color=color, label=part)
        bottom += vals
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.1f} {unit}", (i, total), ha="center", va="bottom")
    ax.set_ylabel(f"{unit} before activations")
    ax.legend()
    return ax


def category_bars(rows: dict[str, dict[str, int]], ax=None, categories=("parameters", "gradients", "optimizer")):
    """Grouped bars comparing byte counts per category (e.g. calculated vs measured), in MiB."""
    ax = _axes(ax)
    names = list(rows)
    width = 0.8 / len(names)
    x = np.arange(len(categories))
    for i, name in enumerate(names):
        ax.bar(x + i * width, [rows[name].get(c, 0) / 2**20 for c in categories], width, label=name)
    ax.set_xticks(x + width * (len(names) - 1) / 2, categories)
    ax.set_ylabel("MiB")
    ax.legend()
    return ax


def profile_timeline(profile, ax=None, unit: float = GIB, title: str | None = None):
    """A step's live memory over time as stacked categories, with the phases shaded and the peak marked."""
    ax = _axes(ax)
    t = np.arange(len(profile.timeline))
    data = profile.timeline.T / unit
    keep = [i for i, c in enumerate(CATEGORIES) if data[i].any()]
    ax.stackplot(t, data[keep], labels=[CATEGORIES[i] for i in keep],
                 colors=[COLORS[CATEGORIES[i]] for i in keep], linewidth=0)
    phases = np.array(profile.phases)
    for phase, shade in (("backward", 0.06), ("optimizer", 0.12)):
        idx = np.flatnonzero(phases == phase)
        if len(idx):
            ax.axvspan(idx[0], idx[-1], color="k", alpha=shade, lw=0)
            ax.annotate(phase, (idx[0], ax.get_ylim()[1]), va="top", fontsize=8)
    peak = int(profile.timeline.sum(axis=1).argmax())
    ax.axvline(peak, color="k", ls=":", lw=1)
    ax.set_xlabel("operator (event) index in one training step")
    ax.set_ylabel("GiB" if unit == GIB else "MiB" if unit == 2**20 else "bytes")
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    return ax


def loss_curves(result, ax=None, mark_best: bool = True):
    """Training and validation loss against step; the validation minimum marked."""
    ax = _axes(ax)
    ax.plot(result.steps, result.losses, color=COLORS["train"], label="train loss", lw=1)
    if result.eval_steps:
        ax.plot(result.eval_steps, result.eval_losses, "o-", color=COLORS["eval"], label="validation loss", ms=3)
        if mark_best:
            i = int(np.argmin(result.eval_losses))
            ax.plot(result.eval_steps[i], result.eval_losses[i], "*", ms=14, color="k",
                    label=f"best: step {result.eval_steps[i]}, {result.eval_losses[i]:.3f}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (nats/token)")
    ax.legend()
    return ax
