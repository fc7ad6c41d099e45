"""benchmarks/lesson_times.py: measured seconds against the minutes needs.yaml promises."""

import json
import sys

from longctx.paths import REPO
from longctx.run import needs

sys.path.insert(0, str(REPO / "benchmarks"))
import lesson_times  # noqa: E402


def test_a_run_is_compared_with_the_promise_of_its_own_size(tmp_path):
    for name, size, seconds in (("02_yarn", "ci", 30.0), ("04_context_parallelism", "cpu", 300.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"size": size, "seconds": seconds}))
    (tmp_path / "01_chunked_loss").mkdir()
    (tmp_path / "01_chunked_loss" / "results.json").write_text(json.dumps({"size": "interactive", "seconds": 5}))
    rows = {r["notebook"]: r for r in lesson_times.rows(tmp_path)}
    assert set(rows) == {"02_yarn", "04_context_parallelism"}  # an interactive session promised nothing
    assert rows["02_yarn"]["ratio"] == 30.0 / (needs.of("02_yarn", "ci").minutes * 60)
    assert rows["04_context_parallelism"]["ratio"] > 1  # five minutes is over what the cpu size promises
