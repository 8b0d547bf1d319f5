"""The documentation works when followed literally: every ```python block of README.md and docs/*.md runs, and
every ```sh block with a ``torch2ir`` / ``ir2torch`` command runs those commands, each page in a fresh folder.

A block that cannot run carries ``<!-- not-run: REASON -->`` on the line before its fence; a marker without a
reason fails. Python blocks of one page run in order in one namespace (a page is read top to bottom); shell
blocks run their ``torch2ir`` / ``ir2torch`` lines in order in the page's folder, where ``tests`` links to the
repository's, so ``--import-path .`` finds the model zoo as from a checkout. Shell blocks without such a
command (``make``, ``python benchmarks/...``, ``pip``) are not run. A command exits 0, or 0/1 where its comment
says "exit code 1 when" (``diff``, ``verify``).

The commands run in this process through the tools' ``main`` (with the page's folder as the current folder,
``sys.path`` restored afterwards), which saves a Python + torch start-up per command; the first ``torch2ir``
and the first ``ir2torch`` command of README.md run through the installed console scripts in a subprocess,
so the commands as installed are covered too.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import ir2torch.cli
import torch2ir.cli
from tests.cli.helpers import REPO, explain, run

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*not-run:(.*?)-->\s*$")
TOOLS = ("torch2ir", "ir2torch")
MAINS = {"torch2ir": torch2ir.cli.main, "ir2torch": ir2torch.cli.main}


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    skip: str | None  # the not-run reason


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with their language and not-run reason."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        before = lines[start - 1] if start else ""
        marker = MARKER.match(before)
        out.append(Block(page, start + 1, match.group(1), "\n".join(body), marker.group(1).strip() if marker else None))
        i += 1
    return out


def _commands(text: str) -> list[tuple[list[str], str]]:
    """``(argv, comment)`` of each ``torch2ir`` / ``ir2torch`` line (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] in TOOLS:
            out.append((words, line.split("#", 1)[1] if " #" in line else ""))
    return out


@contextlib.contextmanager
def _inside(folder: Path):
    here = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    return tmp_path


def test_markers_give_a_reason_and_something_runs():
    found = [b for page in PAGES for b in blocks(page)]
    assert all(b.skip for b in found if b.skip is not None), [f"{b.page.name}:{b.line}" for b in found if b.skip == ""]
    runnable = [b for b in found if b.skip is None and (b.lang == "python" or _commands(b.text))]
    assert len(runnable) >= 15, len(runnable)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang == "python" and b.skip is None for b in blocks(p))],
                         ids=lambda p: p.name)
def test_python_blocks_run(page, tmp_path):
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    with _inside(_folder(tmp_path)):
        for block in blocks(page):
            if block.lang != "python" or block.skip is not None:
                continue
            code = compile(block.text, f"{page.name}:{block.line}", "exec")
            try:
                exec(code, namespace)
            except Exception as exc:
                raise AssertionError(f"{page.name} line {block.line}: {type(exc).__name__}: {exc}") from exc


def _in_process(argv: list[str], folder: Path) -> subprocess.CompletedProcess:
    """Run ``argv`` (``torch2ir ...`` / ``ir2torch ...``) through the tool's ``main`` in ``folder``."""
    out, err, path = io.StringIO(), io.StringIO(), list(sys.path)
    try:
        with _inside(folder), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = MAINS[argv[0]](argv[1:])
            except SystemExit as exc:  # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.path[:] = path  # --import-path . put the page's folder first
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in ("sh", "bash") and b.skip is None
                                                          and _commands(b.text) for b in blocks(p))],
                         ids=lambda p: p.name)
def test_shell_commands_run(page, tmp_path):
    folder = _folder(tmp_path)
    bin_dir = Path(sys.executable).parent
    scripted = set() if page.name == "README.md" else set(TOOLS)  # tools already run as console scripts
    for block in blocks(page):
        if block.lang not in ("sh", "bash") or block.skip is not None:
            continue
        for argv, comment in _commands(block.text):
            if argv[0] in scripted:
                result = _in_process([*argv, "-q"], folder)
            else:
                scripted.add(argv[0])
                result = run([str(bin_dir / argv[0]), *argv[1:], "-q"], timeout=300, cwd=folder)
            allowed = {0, 1} if "exit code 1 when" in comment else {0}
            where = f"{page.name} line {block.line}: {shlex.join(argv)}\n"
            assert result.returncode in allowed, where + explain(result)
    assert scripted == set(TOOLS)
