"""The whole-corpus forward summary the benchmark reports carry: distribution and issue #19's two targets."""

from __future__ import annotations

from benchmarks.corpus import summary
from benchmarks.report import section_corpus


def _row(model: str, batch: int, ratio: float) -> dict:
    return {"model": model, "batch": batch, "ratio": ratio}


def test_the_distribution_is_taken_over_the_rows_that_ran() -> None:
    rows = [_row("a", 1, 0.9), _row("a", 8, 1.2), _row("b", 1, 1.0), {"model": "c", "batch": 1, "error": "x"}]
    s = summary(rows)
    assert (s["rows"], s["ran"], s["failed"]) == (4, 3, 1)
    assert s["median"] == 1.0 and s["max"] == 1.2 and s["p90"] == 1.2
    assert s["worst"][0] == ("a", 8, 1.2)


def test_the_targets_are_median_at_most_one_and_max_at_most_1_05() -> None:
    lines, checks = section_corpus([_row("a", 1, 0.9), _row("b", 1, 0.95), _row("c", 1, 1.04)], ["- load 1.0"])
    assert [c.met for c in checks] == [True, True] and any("0.95x" in line for line in lines)
    _, checks = section_corpus([_row("a", 1, 0.9), _row("b", 1, 0.95), _row("c", 1, 1.06)], [])
    assert [c.met for c in checks] == [True, False] and checks[1].measured == "1.06x"
    _, checks = section_corpus([_row("a", 1, 1.01), _row("b", 1, 1.02)], [])
    assert [c.met for c in checks] == [False, True]
