"""Statistics of per-token loss curves (one mean loss per position): stretches, rise, smoothing, and the unigram
entropy line they are read against."""

import numpy as np


def unigram_entropy(ids) -> float:
    """Entropy (nats per token) of the token frequencies in `ids`: the loss of a model that knows how often each token
    occurs in this text and nothing about order."""
    counts = np.bincount(np.asarray(ids).ravel()).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def stretches(curve: np.ndarray, trained: int, tail: float = 0.2) -> dict:
    """Mean of a per-position curve over the second half of the trained range (enough context, no extrapolation) and
    over the last `tail` of positions."""
    in_range, last = curve[trained // 2 : trained - 1], curve[int((1 - tail) * len(curve)) :]
    return {"in_range": float(in_range.mean()), "last": float(last.mean())}


def rise(curve: np.ndarray, trained: int, tail: float = 0.2) -> float:
    """How far the loss over the last `tail` of positions stands above its in-range level: "climbs past its range"."""
    s = stretches(curve, trained, tail)
    return s["last"] - s["in_range"]


def smooth(curve: np.ndarray, window: int) -> np.ndarray:
    """Moving average (same length; the edges average what they have)."""
    kernel = np.ones(window)
    return np.convolve(curve, kernel, "same") / np.convolve(np.ones_like(curve), kernel, "same")


def onset(curve: np.ndarray, trained: int, *, window: int, threshold: float = 0.25) -> int | None:
    """The first position past the trained range where the smoothed curve stands `threshold` nats above its in-range
    level: where "the loss starts climbing" is read off a curve. None: it never does."""
    above = np.flatnonzero(smooth(curve, window)[trained:] > stretches(curve, trained)["in_range"] + threshold)
    return int(trained + above[0]) if above.size else None
