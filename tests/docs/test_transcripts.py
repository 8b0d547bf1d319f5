"""The command-line transcripts of the docs are what the commands print today: every ```text block with ``$ ``
lines is run command by command in a fresh folder (``tests`` linked to the repository's, as in
``test_docs_run.py``), and the output (stdout, then stderr) must match the lines under the command.

Matching: timings (``1.60s``) are not compared; a line that is just ``...`` stands for any number of lines, and
``...`` inside a line for any text (the docs elide long hints that way). Everything else, file sizes and counts
included, is compared as printed, so a page cannot keep an old output. The files a transcript reads are made
first: ``convnet.ir.json`` / ``convnet.safetensors`` by the README's own ``torch2ir convert`` command, and each
``edited.ir.json`` by the edit :data:`EDITS` names for its command.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.helpers import REPO
from tests.docs.test_docs_run import _folder, _in_process, blocks

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_TIME = re.compile(r"\b\d+\.\d+s\b")


def _edit(impl: str, field: str, value: object) -> Callable[[Path], None]:
    """Write ``edited.ir.json``: ``convnet.ir.json`` with one field of one implementation changed."""

    def write(folder: Path) -> None:
        data = json.loads((folder / "convnet.ir.json").read_text(encoding="utf-8"))
        data["implementations"][impl][field] = value
        (folder / "edited.ir.json").write_text(json.dumps(data), encoding="utf-8")

    return write


#: the ``edited.ir.json`` each command that reads one is shown with (its start -> how the file is made)
EDITS = {
    "ir2torch verify edited.ir.json": _edit("features.3", "kernel_size", 50),  # a max pool larger than its input
    "ir2torch diff convnet.ir.json edited.ir.json": _edit("features.1", "eps", 0.5),
}


def transcripts() -> list[tuple[str, int, list[tuple[str, list[str]]]]]:
    """``(page, line, [(command, expected lines), ...])`` of every ```text block holding ``$ `` lines."""
    out = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang != "text" or not block.text.startswith("$ "):
                continue
            steps: list[tuple[str, list[str]]] = []
            for line in block.text.splitlines():
                if line.startswith("$ "):
                    steps.append((line[2:], []))
                else:
                    steps[-1][1].append(line)
            out.append((page.name, block.line, steps))
    return out


def _pattern(expected: list[str]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(_TIME.sub("<t>", piece)) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def matches(expected: list[str], output: str) -> bool:
    """Whether ``output`` is what the ``expected`` lines show (timings and ``...`` as the module says)."""
    text = _TIME.sub("<t>", output if output.endswith("\n") or not output else output + "\n")
    return _pattern(expected).fullmatch(text) is not None


@pytest.fixture(scope="module")
def convnet(tmp_path_factory) -> Path:
    """A folder with the README's ConvNet files."""
    folder = _folder(tmp_path_factory.mktemp("transcripts"))
    argv = shlex.split("torch2ir convert tests.models.zoo:ConvNet --import-path . -i 2x3x16x16 -o convnet.ir.json "
                       "--state convnet.safetensors")
    assert " ".join(argv) in " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert _in_process(argv, folder).returncode == 0
    return folder


def test_the_pages_have_transcripts() -> None:
    found = transcripts()
    assert len(found) >= 5 and sum(len(steps) for _, _, steps in found) >= 6, found
    assert {c for _, _, steps in found for c, _ in steps if "edited.ir.json" in c} <= {
        c for c in (c for _, _, steps in found for c, _ in steps) if any(c.startswith(k) for k in EDITS)}


@pytest.mark.slow
@pytest.mark.parametrize("transcript", transcripts(), ids=lambda t: f"{t[0]}:{t[1]}")
def test_a_transcript_is_what_the_commands_print(transcript, convnet: Path) -> None:
    page, line, steps = transcript
    for command, expected in steps:
        for start, edit in EDITS.items():
            if command.startswith(start):
                edit(convnet)
        result = _in_process(shlex.split(command), convnet)
        output = result.stdout + result.stderr
        assert matches(expected, output), (
            f"{page} line {line}: `{command}` (exit {result.returncode}) printed\n{output}\nwhere the page shows\n"
            + "\n".join(expected))


@pytest.mark.parametrize(("expected", "output", "ok"), [
    (["convert  1.60s  27 implementations"], "convert  0.31s  27 implementations\n", True),
    (["convert  1.60s  27 implementations"], "convert  0.31s  28 implementations\n", False),
    (["a", "...", "z"], "a\nb\nc\nz\n", True),
    (["a", "...", "z"], "a\nz\n", True),
    (["error: x (hint: ...)"], "error: x (hint: do y)\n", True),
    (["error: x (hint: ...)"], "error: y (hint: do y)\n", False),
    (["a", "b"], "a\nb\nc\n", False),
])
def test_the_matching_compares_what_it_should(expected: list[str], output: str, ok: bool) -> None:
    assert matches(expected, output) is ok
