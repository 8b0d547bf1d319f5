"""The inventory of issue 52 point 5: every number in the prose of README.md and docs/*.md (outside code blocks,
inline code, link targets and issue numbers), each marked tied or not.

A number is tied when it is (or overlaps) a group of a row of :data:`tests.docs.figures.FIGURES` (the page must
say what the row's source gives), stands in a block copied from a results file (``<!-- copied from ... -->``,
kept equal to its file by ``scripts/doc_blocks.py --check``) or in lines a test of its own checks
(:data:`ELSEWHERE`). A number a row's pattern spells literally is not tied: the page
must say it, but nothing says it is true.

``python -m tests.docs.inventory`` prints, per page, the numbers found and those tied; ``-v`` prints each untied
number with its context (``-v PAGE`` only those of one page).
"""

from __future__ import annotations

import re
import sys

from scripts import doc_blocks
from tests.docs import sources as s
from tests.docs.figures import FIGURES

_ONE = r"(?:\d+\*\*\d+|\d+\^\d+|\d{1,3}(?:[ ,]\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)"
#: a number, a range of two, or a power (``10**5``, ``10^6``), with its unit if any
NUMBER = re.compile(rf"(?<![\w.*^-]){_ONE}(?:-{_ONE})?(?:x|%| ?[kMG]i?B| ?m?s| us)?(?![\w*^-]|[.,]\d)")
_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+(?:(?:, | and )#?\d+)*|#\d+\b")  # issue numbers are no figures

#: figures a test of their own checks: (page, the lines' pattern in the page's text)
ELSEWHERE = [
    # test_figures.py::test_the_supported_page_quotes_the_kept_sweep_results: the sweep table, section by section
    ("docs/supported.md", r"^\| [a-z][^|]*? \| \d+ \| [^|]*? \|$"),
]


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text: str) -> str:
    """``text`` with code blocks, inline code, link targets, section, list and issue numbers blanked (same length, so
    offsets still match; line breaks kept)."""
    text = re.sub(r"^```.*?^```", _blank, text, flags=re.M | re.S)
    text = re.sub(r"`(?:[^`\n]|\n(?!\s*\n))*`", _blank, text)  # inline code may wrap, not across paragraphs
    text = re.sub(r"\]\([^)]*\)", lambda m: "]" + _blank(m)[1:], text)
    text = re.sub(r"^#+ \d+\.|\(section \d+\)", _blank, text, flags=re.M)  # section numbers
    text = re.sub(r"^ *\d+\.(?= )", _blank, text, flags=re.M)  # the markers of a numbered list
    return _ISSUE.sub(_blank, text)


def flatten(text: str) -> tuple[str, list[int]]:
    """``text`` with its whitespace collapsed (as the rows' patterns read a page), and the offset in ``text`` of
    each character of it."""
    out: list[str] = []
    where: list[int] = []
    for match in re.finditer(r"\S+", text):
        if out:
            out.append(" ")
            where.append(match.start() - 1)
        out.append(match.group(0))
        where.extend(range(match.start(), match.end()))
    return "".join(out), where


def tied_spans(page: str, raw: str) -> list[tuple[int, int]]:
    """Offsets in ``raw`` (the page's text) of the figures the rows check and of the copied blocks."""
    flat, where = flatten(raw)
    spans = [(b.start, b.end) for b in doc_blocks.blocks(s.ROOT / page)]
    spans += [(m.start(), m.end()) for p, rx in ELSEWHERE if p == page for m in re.finditer(rx, raw, flags=re.M)]
    for figure in FIGURES:
        if figure.page == page:
            for match in re.finditer(figure.pattern, flat):
                spans += [(where[match.start(g)], where[match.end(g) - 1] + 1)
                          for g in range(1, (match.lastindex or 0) + 1) if match.start(g) < match.end(g)]
    return spans


def numbers(page: str) -> list[tuple[str, bool, str]]:
    """``(number, tied, context)`` of each number in ``page``'s prose."""
    raw = (s.ROOT / page).read_text(encoding="utf-8")
    spans = tied_spans(page, raw)
    text = prose(raw).replace("\n", " ")
    out = []
    for match in NUMBER.finditer(text):
        tied = any(a < match.end() and match.start() < b for a, b in spans)  # ``10**(\d+)`` ties ``10**7``
        context = " ".join(raw[max(0, match.start() - 60):match.end() + 30].split())
        out.append((match.group(0), tied, context))
    return out


def inventory() -> dict[str, tuple[int, int]]:
    """``{page: (numbers in the page's prose, numbers of them tied)}``."""
    out = {}
    for path in doc_blocks.pages(s.ROOT):
        page = str(path.relative_to(s.ROOT))
        found = numbers(page)
        out[page] = (len(found), sum(tied for _, tied, _ in found))
    return out


def main(argv: list[str]) -> None:
    counts = inventory()
    for page, (found, tied) in counts.items():
        print(f"{page:24} {found:5} numbers in prose, {tied:4} tied")
        if "-v" in argv and (argv[-1] == "-v" or argv[-1] == page):
            for number, ok, context in numbers(page):
                if not ok:
                    print(f"    {number!r}: ...{context}...")
    print(f"{'total':24} {sum(f for f, _ in counts.values()):5} numbers in prose, "
          f"{sum(t for _, t in counts.values()):4} tied")


if __name__ == "__main__":
    main(sys.argv[1:])
