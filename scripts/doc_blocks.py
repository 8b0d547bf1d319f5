"""Keep the benchmark tables the docs show equal to the results files the benchmarks write.

A page (``README.md``, ``docs/*.md``) marks each block that is a benchmark's output::

    <!-- copied from benchmarks/results.md: ## forward: rebuilt vs eager -->

    ...the block, as the results file has it...

    <!-- end of copy -->

The marker names the results file and a line of it, matched as the start of exactly one line. Under a heading,
the block is that section's body: the lines below the heading up to the next heading of the same or a higher
level. From a line that is no heading, the block is that line and the lines after it up to the next heading of any
level. Blank lines at either end are left out. ``table copied from`` or ``list copied from`` instead of ``copied
from`` takes only the first Markdown table (``|`` lines) or list (``- `` lines) of that block.

``python scripts/doc_blocks.py --write`` copies every block from its file; ``--check`` exits 1, naming the stale
blocks, when a page differs (``tests/docs/test_doc_blocks.py`` runs it). A results file is read as text; nothing
of it is run. Rerunning a benchmark rewrites its results file, then ``--write`` brings the pages along.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = re.compile(r"^<!-- (?:(table|list) )?copied from (\S+): (.+?) -->$")
END = "<!-- end of copy -->"


class BlockError(ValueError):
    """A marker that names no file or no unique line, or a block without its end marker."""


@dataclass(frozen=True)
class Block:
    """One marked block of a page: where it is, what it names, and what it holds now."""

    page: Path
    line: int  # 1-based line of the start marker
    part: str  # "": the whole section; "table" / "list": its first table / list
    source: str  # path relative to the repository root
    heading: str
    start: int  # offsets into the page's text of the block's body (between the markers)
    end: int

    def expected(self, root: Path) -> str:
        """The block's body as the results file gives it."""
        return extract((root / self.source).read_text(encoding="utf-8"), self.heading, self.part, self.source)

    def label(self, root: Path) -> str:
        return f"{self.page.relative_to(root)}:{self.line}: {self.source}: {self.heading}"


def _level(line: str) -> int:
    match = re.match(r"(#+) ", line)
    return len(match.group(1)) if match else 0


def extract(text: str, heading: str, part: str = "", name: str = "the file") -> str:
    """The section of ``text`` under the one line starting with ``heading`` (or its first table or list)."""
    lines = text.splitlines()
    found = [i for i, line in enumerate(lines) if line.startswith(heading)]
    if len(found) != 1:
        raise BlockError(f"{name}: {len(found)} lines start with {heading!r} (need exactly one)")
    level = _level(lines[found[0]]) or 99
    body: list[str] = [] if level < 99 else [lines[found[0]]]  # a line that is no heading is copied too
    fenced = False
    for line in lines[found[0] + 1:]:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and 0 < _level(line) <= level:
            break
        body.append(line)
    if part:
        mark = "|" if part == "table" else "- "
        rows = [i for i, line in enumerate(body) if line.startswith(mark)]
        if not rows:
            raise BlockError(f"{name}: no {part} under {heading!r}")
        kept = []
        for line in body[rows[0]:]:
            if not line.startswith(mark):
                break
            kept.append(line)
        body = kept
    return "\n".join(body).strip("\n")


def blocks(page: Path) -> list[Block]:
    """The marked blocks of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    out = []
    i = 0
    while i < len(lines):
        match = START.match(lines[i].rstrip("\n"))
        if match:
            j = i + 1
            while j < len(lines) and lines[j].rstrip("\n") != END:
                if START.match(lines[j].rstrip("\n")):
                    raise BlockError(f"{page}:{j + 1}: a block starts inside the block of line {i + 1}")
                j += 1
            if j == len(lines):
                raise BlockError(f"{page}:{i + 1}: no {END!r} after the marker")
            out.append(Block(page, i + 1, match.group(1) or "", match.group(2), match.group(3), offsets[i + 1],
                             offsets[j]))
            i = j
        i += 1
    return out


def pages(root: Path = ROOT) -> list[Path]:
    """The pages that may hold blocks."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def render(page: Path, root: Path = ROOT) -> str:
    """``page``'s text with every block copied from its results file (a blank line inside each marker)."""
    text = page.read_text(encoding="utf-8")
    out, last = [], 0
    for block in blocks(page):
        out += [text[last:block.start], "\n", block.expected(root), "\n\n"]
        last = block.end
    return "".join([*out, text[last:]])


def stale(root: Path = ROOT) -> list[str]:
    """The blocks whose page text differs from their results file (labels), for every page."""
    found = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        for block in blocks(page):
            if text[block.start:block.end].strip("\n") != block.expected(root):
                found.append(block.label(root))
    return found


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="copy every marked block from its results file")
    group.add_argument("--check", action="store_true", help="exit 1 when a marked block differs from its file")
    options = parser.parse_args(argv)
    try:
        if options.write:  # every page rendered before any is written: a bad marker leaves them all as they were
            rendered = {page: render(page, root) for page in pages(root)}
            for page, new in rendered.items():
                if new != page.read_text(encoding="utf-8"):
                    page.write_text(new, encoding="utf-8")
                    print(f"wrote {page.relative_to(root)}")
            return 0
        found = stale(root)
    except (BlockError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for label in found:
        print(f"stale: {label}", file=sys.stderr)
    if found:
        print("run `python scripts/doc_blocks.py --write` after the benchmark wrote its file", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
