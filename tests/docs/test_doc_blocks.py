"""The benchmark tables the pages show are the results files' own (``scripts/doc_blocks.py``): a page whose copied
block differs from its file, or names a file or heading that is not there, fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import doc_blocks


def test_every_copied_block_equals_its_results_file() -> None:
    stale = doc_blocks.stale()
    assert not stale, f"stale blocks (run `python scripts/doc_blocks.py --write`): {stale}"
    assert doc_blocks.main(["--check"]) == 0


def test_the_performance_page_copies_its_tables() -> None:
    """Every Markdown table of performance.md, indented in a list item or not, stands in a copied block."""
    page = doc_blocks.ROOT / "docs" / "performance.md"
    text = page.read_text(encoding="utf-8")
    blocks = doc_blocks.blocks(page)
    assert len(blocks) >= 20
    inside = {i for b in blocks for i in range(b.start, b.end)}
    offset, loose = 0, []
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("|") and offset not in inside:
            loose.append(line[:60])
        offset += len(line)
    assert not loose, f"tables of performance.md not copied from a results file: {loose}"


def _repo(tmp_path: Path, page: str, results: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "README.md").write_text("# x\n", encoding="utf-8")
    (tmp_path / "docs" / "page.md").write_text(page, encoding="utf-8")
    (tmp_path / "benchmarks" / "results-x.md").write_text(results, encoding="utf-8")
    return tmp_path


RESULTS = "# run\n\n- 2 cores\n\n## speed\n\n| a | b |\n|---|---|\n| x | 1.5x |\n\nnote 3 s\n\n## other\n\n| c |\n"


@pytest.mark.parametrize(("marker", "body"), [
    ("copied from benchmarks/results-x.md: ## speed", "| a | b |\n|---|---|\n| x | 1.5x |\n\nnote 3 s"),
    ("table copied from benchmarks/results-x.md: ## speed", "| a | b |\n|---|---|\n| x | 1.5x |"),
    ("list copied from benchmarks/results-x.md: # run", "- 2 cores"),
    ("copied from benchmarks/results-x.md: note", "note 3 s"),
])
def test_write_copies_and_check_compares(tmp_path: Path, marker: str, body: str) -> None:
    page = f"text\n\n<!-- {marker} -->\n\n| a | b |\n|---|---|\n| x | 1.4x |\n\n<!-- end of copy -->\n\nafter\n"
    root = _repo(tmp_path, page, RESULTS)
    assert doc_blocks.main(["--check"], root) == 1  # the page's 1.4x is stale
    assert doc_blocks.main(["--write"], root) == 0
    written = (root / "docs" / "page.md").read_text(encoding="utf-8")
    assert written == f"text\n\n<!-- {marker} -->\n\n{body}\n\n<!-- end of copy -->\n\nafter\n"
    assert doc_blocks.main(["--check"], root) == 0
    (root / "benchmarks" / "results-x.md").write_text(RESULTS.replace("1.5x", "1.6x").replace("3 s", "4 s")
                                                      .replace("2 cores", "4 cores"), encoding="utf-8")
    assert doc_blocks.main(["--check"], root) == 1  # a rerun changed the file: the page is stale again


@pytest.mark.parametrize("page", [
    "<!-- copied from benchmarks/results-x.md: ## missing -->\n\n<!-- end of copy -->\n",  # no such heading
    "<!-- copied from benchmarks/results-x.md: ## -->\n\n<!-- end of copy -->\n",  # a prefix of two headings
    "<!-- copied from benchmarks/results-y.md: ## speed -->\n\n<!-- end of copy -->\n",  # no such file
    "<!-- copied from benchmarks/results-x.md: ## speed -->\n\n| a |\n",  # no end marker
    "<!-- copied from benchmarks/results-x.md: ## speed -->\n<!-- copied from benchmarks/results-x.md: ## other -->\n"
    "<!-- end of copy -->\n",  # a block inside a block
])
def test_a_marker_that_names_nothing_fails(tmp_path: Path, page: str) -> None:
    root = _repo(tmp_path, page, RESULTS)
    assert doc_blocks.main(["--check"], root) == 1
    assert doc_blocks.main(["--write"], root) == 1
    assert (root / "docs" / "page.md").read_text(encoding="utf-8") == page  # nothing written
