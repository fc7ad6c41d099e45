"""Cards as a capacity: the driver's reported total where a public record shows it, and the terms an estimate
does not count, named beside every verdict."""

import json

import pytest
from conftest import refused, small_config

from longctx.memory import cards
from longctx.paths import REPO
from longctx.tools.cli import main
from longctx.units import GIB, MIB


def test_a_card_is_its_reported_total_not_its_name():
    gib, how = cards.capacity("H100-80GB")
    assert gib == 81559 * MIB / GIB < 80  # an "80 GB" card reports about 79.6 GiB
    assert "modal-labs/modal-client" in how
    assert cards.capacity("h100-80gb")[0] == gib  # as people type it
    assert cards.capacity(40)[0] == cards.capacity("40")[0] == 40.0
    rtx, how = cards.capacity("RTX-4090")  # no driver total on record: the datasheet's decimal GB, said so
    assert rtx == 24e9 / GIB and "not on record" in how


def test_the_h200_is_what_our_h200_reported_and_the_cache_margin_is_what_it_measured():
    report = json.loads((REPO / "benchmarks/results/gpu_check-h200-2026-12-04/2-tracker-fixed/gpu_check.json").read_text())
    assert cards.capacity("H200")[0] == report["measure"]["capacity_gib"]
    steps = [e for e in report["measure"]["estimates"] if e.get("allocator_peak_gib")]
    ratios = [e["reserved_peak_gib"] / e["allocator_peak_gib"] for e in steps]
    assert len(steps) == 11 and cards.RESERVED_OVER_ALLOCATED == (round(min(ratios), 4), round(max(ratios), 4))
    fits = cards.verdict(60.0, "H200")
    low, high = (60 * (r - 1) for r in cards.RESERVED_OVER_ALLOCATED)
    assert f"may want {low:.1f}–{high:.1f} GiB more" in fits and f"{min(ratios) - 1:.0%} to {max(ratios) - 1:.0%}" in fits


@pytest.mark.parametrize("bad", ["H100", "0", "-8", "nan", "inf", None])
def test_unknown_cards_and_impossible_sizes_are_refused_with_the_list(bad):
    with refused("H100-80GB"):
        cards.capacity(bad)


def test_the_verdict_names_what_it_leaves_out():
    fits = cards.verdict(70.0, "A100-80GB")
    assert fits.startswith("fits") and "CUDA context" in fits and "allocator rounding" in fits
    assert "NCCL" not in fits  # one GPU exchanges nothing
    over = cards.verdict(79.9, "H100-80GB", cp_size=4)
    assert over.startswith("does not fit") and "NCCL buffers" in over
    assert f"{79.9 - 81559 * MIB / GIB:.2f}".lstrip("-") in over


def test_estimate_says_the_card_and_what_is_not_counted(tmp_path, capsys):
    model = small_config(tmp_path)
    assert main(["estimate", "--model", model, "--seq-len", "1k", "--gpu", "L40S"]) == 0
    out = capsys.readouterr().out
    assert "L40S: fits L40S: 44.99 GiB reported by the driver" in out and "CUDA context" in out
    assert main(["estimate", "--model", model, "--seq-len", "1k", "--gpu", "0.001", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fit"].startswith("does not fit 0.001 GiB as given")
    assert main(["estimate", "--model", model, "--seq-len", "1k", "--gpu", "B300"]) == 2  # refused before estimating
    assert "Unknown GPU 'B300'" in capsys.readouterr().err
