"""A memory profile's reading of its own timeline."""


def test_a_profile_names_the_row_where_a_phase_ends():
    import numpy as np

    from longctx.memory.profile import CATEGORIES, MemoryProfile

    timeline = np.arange(3 * len(CATEGORIES)).reshape(3, len(CATEGORIES))
    prof = MemoryProfile("cpu", "test", timeline, ["forward", "forward", "backward"], 0, "forward", {})
    assert prof.last_row("forward") == 1 and prof.last_row("optimizer") is None
    assert prof.end_of("forward") == dict(zip(CATEGORIES, timeline[1].tolist())) and prof.end_of("optimizer") == {}
