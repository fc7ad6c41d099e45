"""The guide's figures as the lessons print them, and the versions the guide requires."""

import pytest

from longctx import guide


def test_a_recap_line_shows_ours_to_the_guides_precision():
    assert guide.beside(guide.FIRST_LOSS_1M, 4.0757, ratio=False).endswith("guide 4.311, ours 4.076")
    assert guide.beside(guide.QWEN3_4B_96K, 59.79).endswith("guide 59.9, ours 59.8 (1.00×)")
    assert guide.beside(guide.REACH_CHUNKED, 152576).endswith("guide 163,840, ours 152,576 (0.93×)")
    assert guide.beside(guide.REACH_OFFLOAD, None).endswith("guide 262,144; not computed at this size")
    # ours are GiB; the guide's GB are read as GiB, and the line says so
    assert "peak (its GB read as GiB): guide 59.9" in guide.beside(guide.QWEN3_4B_96K, 59.79)


@pytest.mark.parametrize("lever", list(guide.REQUIREMENTS))
def test_this_install_meets_what_the_guide_requires(lever):
    lines = guide.requirements(lever)
    assert len(lines) == len(guide.REQUIREMENTS[lever])
    assert all("meets it" in line or "not installed" in line for line in lines), lines
