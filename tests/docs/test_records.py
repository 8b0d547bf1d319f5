"""The log of runs ``scripts/op_fuzz.py`` keeps (``benchmarks/results_file.append_row``) and the rows the pages'
records are read from (:mod:`tests.docs.records`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks import results_file
from tests.docs import records, sources


def test_a_run_adds_a_row_and_keeps_the_earlier_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results_file, "update_pages", lambda: None)
    path = tmp_path / "results-log.md"
    results_file.append_row(str(path), "a log", "intro", ["run", "documents"], ["first", "10"])
    results_file.append_row(str(path), "ignored: the file has its title", "ignored", ["run", "documents"],
                            ["second", "20"])
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# a log\n\nintro\n\n| run | documents |\n|---|---|\n") and "ignored" not in text
    assert [row["documents"] for row in sources.table(str(path))] == ["10", "20"]
    results_file.append_row("-", "printed only", "", ["run"], ["third"])
    assert "third" not in path.read_text(encoding="utf-8")


def test_the_fuzz_script_records_its_outcomes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``scripts/op_fuzz.py`` writes a row the records read: named outcomes in their columns, the rest together."""
    from scripts import op_fuzz

    monkeypatch.setattr(results_file, "update_pages", lambda: None)
    path = tmp_path / "results-op-fuzz.md"
    options = op_fuzz.argparse.Namespace(label=None, ops="aten.add.Tensor", output=str(path))
    outcomes = Counter({"ok": 3, "ExecutionError": 4, "IRFormatError": 2, "not-an-IRError": 1})
    op_fuzz._record(options, ["--ops", "aten.add.Tensor"], 1.0, 1, 10, 10, 7, 1, outcomes)
    row, = sources.table(str(path))
    assert row["run"] == "1 operator (aten.add.Tensor)" and row["findings"] == "1"
    assert (row["ran"], row["ExecutionError"], row["UnsafeTargetError"], row["other IRErrors"]) == ("3", "4", "0", "2")
    assert row["command"] == "`python scripts/op_fuzz.py --ops aten.add.Tensor`"


def test_a_run_with_a_finding_is_not_quoted_as_clean() -> None:
    assert records.fuzz("the long run, the shard", "findings") == ("1",)
    with pytest.raises(AssertionError):
        records.fuzz("the long run, the shard", "documents")
    assert records.spaced("2012") == "2012" and records.spaced("127480") == "127 480"


def test_a_recorded_newest_run_fits_the_kept_file() -> None:
    """``scripts/newest_site.py --record`` adds rows with the columns of ``benchmarks/results-newest.md``."""
    from scripts import newest_site

    row = sources.table("results-newest.md")[0]
    assert list(row) == newest_site.RECORD
    assert records.newest_runs()[1:3] == ("2 min 34 s", "3 min 9 s")
