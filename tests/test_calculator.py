"""The site's memory calculator (calculator/): its committed data are the estimator's numbers, at every point the page
offers. The page itself is checked in Chromium by tests/browser/test_site_browser.py (`make site-check`)."""

import json

import pytest

from longctx.memory import explore
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
