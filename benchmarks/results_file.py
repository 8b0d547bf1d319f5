"""The results files the benchmark scripts keep in ``benchmarks/`` (``results-*.md``): a title, the command, the
date and the machine, then the script's Markdown. ``docs/performance.md`` copies their blocks
(``scripts/doc_blocks.py``), so a rerun rewrites the file and ``python scripts/doc_blocks.py --write`` the page.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def header(title: str, argv: list[str], load_at_start: float) -> str:
    """``# title`` and one line saying how, when and where the figures below were measured."""
    script = Path(sys.argv[0]).resolve()
    command = " ".join(["python", str(script.relative_to(BENCH.parent)) if script.is_relative_to(BENCH.parent)
                        else script.name, *map(shlex.quote, argv)])
    return (f"# {title}\n\n`{command}` ({datetime.date.today().isoformat()}; {_cpu()}, {os.cpu_count()} cores, load "
            f"average {load_at_start:.2f} at start; Python {platform.python_version()}, torch {_version('torch')}, "
            f"transformers {_version('transformers')}).\n")


def update_pages() -> None:
    """Copy the blocks the docs take from the results files again (``scripts/doc_blocks.py --write``), so a rerun
    updates the file and the pages together; ``tests/docs`` then says which prose figures moved."""
    from scripts import doc_blocks

    if doc_blocks.main(["--write"]) != 0:
        print("the docs' copied blocks were not updated (see above)", file=sys.stderr)


def write(path: str, title: str, argv: list[str], load_at_start: float, body: str) -> None:
    """Print ``body`` and, unless ``path`` is ``-``, write it under :func:`header` to ``path`` and update the pages
    that copy it."""
    print(body)
    if path != "-":
        Path(path).write_text(f"{header(title, argv, load_at_start)}\n{body.rstrip()}\n", encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
        update_pages()


def append_row(path: str, title: str, intro: str, columns: list[str], row: list[str]) -> None:
    """Print ``row`` and, unless ``path`` is ``-``, add it as the last line of the table of ``path``, a file of
    runs (each run a row, the earlier ones kept: a log such as ``scripts/op_fuzz.py`` writes); a new file gets
    ``# title``, ``intro`` and the table's head first. Then update the pages that copy it."""
    line = "| " + " | ".join(row) + " |"
    print(line)
    if path == "-":
        return
    file = Path(path)
    text = (file.read_text(encoding="utf-8").rstrip() + "\n" if file.exists()
            else f"# {title}\n\n{intro}\n\n| {' | '.join(columns)} |\n|{'---|' * len(columns)}\n")
    file.write_text(text + line + "\n", encoding="utf-8")
    print(f"added a row to {path}", file=sys.stderr)
    update_pages()


def machine(load_at_start: float) -> str:
    """The date, the CPU's cores, the load average at the start, and the Python and torch versions."""
    return (f"{datetime.date.today().isoformat()}; {os.cpu_count()} cores, load average {load_at_start:.2f} at "
            f"start; Python {platform.python_version()}, torch {_version('torch')}")


def output_help(name: str) -> str:
    return f"results file to write (default benchmarks/{name}; '-' prints only)"
