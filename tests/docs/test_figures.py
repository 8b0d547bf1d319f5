"""Figures the README and docs quote are tied to where they come from (the files the code reads or the benchmark
results kept in the repository), so a page cannot go on quoting an old count."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common import surface

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: phrasings of the default surface's size
_SURFACE = [re.compile(r"(\d+) overloads real models' conversions emit"),
            re.compile(r"the surface is \*\*(\d+) overloads\*\*"),
            re.compile(r"default operator surface of (\d+) overloads")]


def _text(page: Path) -> str:
    return " ".join(page.read_text(encoding="utf-8").split())  # a phrase may break across lines


def test_every_page_quotes_the_default_surface_s_size() -> None:
    size = len(surface.parse(surface.TABLE.read_text(encoding="utf-8")))
    quoted = [(page.name, int(m.group(1))) for page in PAGES for rx in _SURFACE for m in rx.finditer(_text(page))]
    assert len(quoted) >= 3, quoted  # README, ir-spec.md (twice), limitations.md say it
    assert all(n == size for _, n in quoted), (size, quoted)


def _sweep_sections(text: str) -> list[tuple[str, int, dict[str, int]]]:
    """``(title, models, {status: count})`` of each section of benchmarks/results-sweep.md."""
    out = []
    for part in re.split(r"^### ", text, flags=re.M)[1:]:
        head = re.match(r"(.+): (\d+) models", part)
        assert head, part[:80]
        counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| ([a-z ]+) \| (\d+) \|$", part, flags=re.M)}
        out.append((head.group(1), int(head.group(2)), counts))
    return out


def test_the_supported_page_quotes_the_kept_sweep_results() -> None:
    results = _sweep_sections((ROOT / "benchmarks" / "results-sweep.md").read_text(encoding="utf-8"))
    page = (ROOT / "docs" / "supported.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| ([a-z][^|]*?) \| (\d+) \| ([^|]*?) \|$", page, flags=re.M)
    assert [(t, str(n)) for t, n, _ in results] == [(t, n) for t, n, _ in rows]
    for (title, models, counts), (_, _, totals) in zip(results, rows):
        quoted = {m.group(2): int(m.group(1)) for m in re.finditer(r"(\d+) ([a-z ]+?)(?:,|$)", totals)}
        assert quoted == counts, title
        assert sum(counts.values()) == models, title


@pytest.mark.parametrize("phrase", ["43 unmatched", "1234 overloads real models' conversions emit"])
def test_the_checks_would_see_a_stale_figure(phrase: str) -> None:
    """The surface pattern reads a planted figure (so a stale one would fail the test above)."""
    found = [int(m.group(1)) for rx in _SURFACE for m in rx.finditer(phrase)]
    assert found == ([1234] if "overloads" in phrase else [])
