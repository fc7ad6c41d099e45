"""The site's memory calculator (calculator/): its committed data are the estimator's numbers, at every point the page
offers, and so is lesson 07's reach table (calculator/reach.json). The page itself is checked in Chromium by
tests/browser/test_site_browser.py (`make site-check`)."""

import importlib.util
import json

import pytest

from longctx.memory import cards, explore, timing
from longctx.memory.estimate import estimate
from longctx.memory.plan import ladder, short_label
from longctx.paths import REPO

DATA = REPO / "calculator" / "estimates.js"


def load() -> dict:
    text = DATA.read_text()
    return json.loads(text[text.index("=") + 1 :].strip().rstrip(";"))


def test_the_data_cover_every_model_length_and_plan_step():
    data = load()
    assert data["models"] == list(explore.MODELS) and data["lengths"] == explore.LENGTHS
    assert [s["label"] for s in data["steps"]] == [short_label(levers) for levers, _ in ladder(8)]
    for model in data["models"]:
        table = data["estimates"][model]
        assert len(table) == len(data["steps"]) and all(len(row) == len(data["lengths"]) for row in table)
        assert all("peak_gib" in e or "error" in e for row in table for e in row)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "seq_len", "step"),
    [("qwen3-0.6b", 4096, "chunked"), ("qwen3-4b", 131072, "+offload"), ("qwen3-8b", 1048576, "+CP×8")],
)
def test_the_page_shows_what_longctx_estimate_gives(model, seq_len, step):
    data = load()
    index = [s["label"] for s in data["steps"]].index(step)
    shown = data["estimates"][model][index][data["lengths"].index(seq_len)]
    fresh = estimate(model, seq_len, **ladder(8)[index][1])
    assert shown["peak_gib"] == pytest.approx(fresh.peak_gib, abs=1e-4)
    assert shown["host_gib"] == pytest.approx(fresh.host_peak_bytes / 2**30, abs=1e-4) and shown["phase"] == fresh.peak_phase
    for card, seconds in shown["seconds"].items():  # the time model's, on every card the page offers
        assert seconds == pytest.approx(timing.step_time(fresh, card)["seconds"], abs=1e-4)


def _reach_table():
    """scripts/reach_table.py, imported from its file (scripts/ is not a package), and the data it committed."""
    spec = importlib.util.spec_from_file_location("reach_table", REPO / "scripts" / "reach_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, json.loads(module.OUT.read_text())


def test_the_reach_table_covers_every_model_card_and_lever_set():
    script, data = _reach_table()
    assert data["models"] == list(script.MODELS) and data["lever_sets"] == script.LEVER_SETS
    assert data["cards"] == {c: round(cards.capacity(c)[0], 4) for c in script.CARDS}
    for model in script.MODELS:
        for levers in script.LEVER_SETS:
            column = data["reach"][model][levers]
            assert list(column) == list(script.CARDS)
            fits = [c["seq_len"] for c in column.values() if "seq_len" in c]
            assert fits == sorted(fits) and all("over the" in c["error"] for c in column.values() if "error" in c)
            assert all(c["peak_gib"] <= data["cards"][card] for card, c in column.items() if "peak_gib" in c)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "levers", "card"),
    [
        ("qwen3-0.6b", "guide's levers", "RTX-4090"),
        pytest.param("llama-3.1-8b", "+ tiled MLP", "H100-80GB", marks=pytest.mark.exhaustive),
        pytest.param("llama-3.1-8b", "ALST, one GPU", "H100-80GB", marks=pytest.mark.exhaustive),
    ],
)
def test_a_reach_table_cell_fits_and_one_step_more_does_not(model, levers, card):
    script, data = _reach_table()
    cell, kwargs = data["reach"][model][levers][card], data["lever_sets"][levers]
    step = data["multiple"][str(kwargs.get("cp_size", 1))]
    at = estimate(script.spec(model), cell["seq_len"], **kwargs).peak_gib
    assert at == pytest.approx(cell["peak_gib"], abs=1e-4) and at <= cards.capacity(card)[0]
    assert estimate(script.spec(model), cell["seq_len"] + step, **kwargs).peak_gib > cards.capacity(card)[0]
