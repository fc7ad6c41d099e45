"""`explore()`: the full-size estimator behind a few controls in JupyterLab — model, length, levers, GPUs, card —
redrawing the step's peak by category, the verdict against the card and the step's time on it at each change (fast
path: memory/repeat.py)."""

from functools import lru_cache

from longctx.errors import LongctxError
from longctx.memory import cards, timing
from longctx.memory.estimate import estimate
from longctx.units import GIB

LENGTHS = [2**n for n in range(12, 21)]  # 4k … 1M tokens
MODELS = ("qwen3-0.6b", "qwen3-4b", "qwen3-8b")


@lru_cache(maxsize=512)
def peak(model: str, seq_len: int, loss: str, checkpointing: bool, offload: bool, gpus: int) -> dict:
    """The estimated step at these settings (per GPU under context parallelism), with its time on every card, kept
    for the next visit."""
    p = estimate(model, seq_len, loss=loss, checkpointing=checkpointing, offload=offload, cp_size=gpus)
    gib = {k: v / GIB for k, v in p.peak_breakdown.items() if v}
    seconds = {card: timing.step_time(p, card)["seconds"] for card in cards.CARDS}
    return {"peak_gib": p.peak_gib, "phase": p.peak_phase, "gib": gib, "host_gib": p.host_peak_bytes / GIB, "seconds": seconds}


def explore(model: str = "qwen3-4b", seq_len: int = 98304, gpu: str = "H100-80GB", models=MODELS):
    """Show the controls and, under them, the figure each change redraws; returns the controls' ipywidgets box, whose
    `.state` holds the last drawn estimate and `.figure` its figure (None after a setting the estimator refuses)."""
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import DisplayHandle, Pretty, display

    from longctx import plots

    label = lambda n: f"{n // 2**20}M" if n >= 2**20 else f"{n // 1024}k"  # noqa: E731
    lengths = sorted({*LENGTHS, seq_len})
    controls = {
        "model": w.Dropdown(options=list(dict.fromkeys([model, *models])), value=model, description="model"),
        "seq_len": w.SelectionSlider(options=[(label(n), n) for n in lengths], value=seq_len, description="tokens"),
        "loss": w.ToggleButtons(options=["plain", "chunked"], value="chunked", description="loss"),
        "checkpointing": w.Checkbox(value=True, description="checkpointing"),
        "offload": w.Checkbox(value=False, description="offload"),
        "gpus": w.Dropdown(options=[1, 2, 4, 8], value=1, description="GPUs (CP)"),
        "gpu": w.Dropdown(options=list(cards.CARDS), value=gpu, description="card"),
    }
    box = w.VBox([w.HBox(list(controls.values())[:3]), w.HBox(list(controls.values())[3:])])
    drawing = DisplayHandle()

    def draw(_=None):
        v = {k: c.value for k, c in controls.items()}
        show = drawing.update if box.state else drawing.display
        try:
            box.state = dict(v, **peak(v["model"], v["seq_len"], v["loss"], v["checkpointing"], v["offload"], v["gpus"]))
        except LongctxError as exc:  # offload without checkpointing, a length CP cannot split, ...
            box.state, box.figure = dict(v, error=str(exc)), None
            return show(Pretty(str(exc)))
        host = {"host (offloaded)": box.state["host_gib"]} if box.state["host_gib"] else {}
        ax = plots.bars({**box.state["gib"], **host}, ylabel="GiB at the peak", annotate="{:.2f}")
        capacity = cards.capacity(v["gpu"])[0]
        ax.axhline(capacity, color="k", lw=1, ls="--", label=f"{v['gpu']}: {capacity:.1f} GiB")
        ax.legend(fontsize=8)
        seconds = box.state["seconds"][v["gpu"]]
        fits = cards.verdict(box.state["peak_gib"], v["gpu"], v["gpus"]).startswith("fits")  # (its card note: the legend's)
        ax.set_title(
            f"{v['model']} at {v['seq_len']:,} tokens: {box.state['peak_gib']:.1f} GiB per GPU ({box.state['phase']}), "
            f"{'fits' if fits else 'does not fit'} {v['gpu']}\n"
            f"{seconds:,.1f} s per step on {v['gpus']} GPU(s), {v['seq_len'] / seconds:,.0f} tokens/s (the time model)",
            fontsize=9,
        )
        show(ax.figure)
        box.figure = ax.figure  # (closed below, and still drawn by savefig)
        plt.close(ax.figure)

    box.state = {}
    display(box)
    for c in controls.values():
        c.observe(draw, names="value")
    draw()
    return box
