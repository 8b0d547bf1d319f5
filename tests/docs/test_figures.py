"""Figures the README and docs quote are tied to where they come from (the files the code reads or the benchmark
results kept in the repository), so a page cannot go on quoting an old count: one test per row of
:data:`tests.docs.figures.FIGURES`, named after the page and the figure."""

from __future__ import annotations

import re

import pytest

from tests.docs import sources
from tests.docs.figures import FIGURES, Figure

ROOT = sources.ROOT


def _text(page: str) -> str:
    return " ".join((ROOT / page).read_text(encoding="utf-8").split())  # a phrase may break across lines


@pytest.mark.parametrize("figure", FIGURES, ids=[f.id for f in FIGURES])
def test_the_page_quotes_the_figure_its_source_gives(figure: Figure) -> None:
    matches = list(re.finditer(figure.pattern, _text(figure.page)))
    assert matches, f"{figure.id}: the page no longer says /{figure.pattern}/: tie the new phrase in figures.py"
    expected = figure.source()
    for match in matches:
        assert match.groups() == expected, (
            f"{figure.id}: the page says {match.groups()} in {match.group(0)!r}; its source gives {expected}")


def test_every_row_names_an_existing_page() -> None:
    assert all((ROOT / f.page).is_file() for f in FIGURES)
    assert len({f.id for f in FIGURES}) == len(FIGURES), "two rows share a name"


def test_the_supported_page_quotes_the_kept_sweep_results() -> None:
    """docs/supported.md's sweep table is benchmarks/results-sweep.md's totals, section by section."""
    results = sources.sweeps()
    page = (ROOT / "docs" / "supported.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([a-z][^|]*?) \| (\d+) \| ([^|]*?) \|$", page, flags=re.M)
    assert [(t, str(n)) for t, n, _ in results] == [(t, n) for t, n, _ in rows]
    for (title, models, counts), (_, _, totals) in zip(results, rows):
        quoted = {m.group(2): int(m.group(1)) for m in re.finditer(r"(\d+) ([a-z ]+?)(?:,|$)", totals)}
        assert quoted == counts, title
        assert sum(counts.values()) == models, title


def test_a_stale_figure_fails_its_row(tmp_path, monkeypatch) -> None:
    """A page quoting another number than its source fails, and so does a page that dropped the phrase."""
    page = tmp_path / "page.md"
    monkeypatch.setattr(sources, "ROOT", tmp_path)
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        figure = Figure("page.md", "planted", r"the (\d+) overloads real models'", lambda: ("317",))
        for text, ok in [("by default the 317 overloads real models' conversions emit", True),
                         ("by default the\n1234 overloads real models' conversions emit", False),
                         ("nothing here", False)]:
            page.write_text(text, encoding="utf-8")
            if ok:
                test_the_page_quotes_the_figure_its_source_gives(figure)
            else:
                with pytest.raises(AssertionError):
                    test_the_page_quotes_the_figure_its_source_gives(figure)
    finally:
        ROOT = old


def test_the_results_tables_are_read_as_written() -> None:
    """The extractors read the results files' own cells (a planted row of another shape would not parse)."""
    rows = sources.table("results-quick.md", "Targets")
    assert rows and {"target", "measured", "limit", "met"} <= set(rows[0])
    n, worst, median = sources.trace_once_corpus()
    assert int(n) > 100 and float(median[:-1]) <= float(worst[:-1])


def test_the_inventory_lists_every_page() -> None:
    """``python -m tests.docs.inventory`` reads every page and marks as tied the figures the rows check (a group of
    a row) and those of copied blocks, and no other number."""
    from tests.docs import generate_figures, inventory

    counts = inventory.inventory()
    assert set(counts) == {"README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))}
    assert all(tied <= found for found, tied in counts.values())
    numbers = inventory.numbers("docs/limitations.md")
    tied = {n for n, ok, _ in numbers if ok}
    assert {generate_figures.first_run()[0]} <= tied  # a group of the generate() row
    assert ("1.05x", False) in {(n, ok) for n, ok, _ in numbers}  # the target, spelled in the row's pattern
    page = inventory.numbers("docs/performance.md")
    assert all(ok for n, ok, c in page if "| llama | 1 | dynamic |" in c and n == "1.10x")  # a copied block


def test_the_inventory_reads_prose_only() -> None:
    """Code, inline code (wrapped too), link targets, section, list and issue numbers are no figures; ranges and
    powers of ten are one each."""
    from tests.docs import inventory

    text = ("## 1. a `x\n3` b [l](p4.md) 10**5 nodes, 0.99-1.05x, 12 of 20 (section 2), issue 52 and #7\n```\n9\n```\n"
            "2. a list item of 3 kB\n  10. another\n2.5 GB\n")
    assert inventory.NUMBER.findall(inventory.prose(text)) == ["10**5", "0.99-1.05x", "12", "20", "3 kB", "2.5 GB"]
    flat, where = inventory.flatten("a\n  bc d")
    assert flat == "a bc d" and [where[i] for i in (0, 2, 3, 5)] == [0, 4, 5, 7]
