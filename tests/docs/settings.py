"""Rows of :data:`tests.docs.figures.FIGURES` for settings the pages quote from the code, the benchmarks and the
tests that are not bounds of a file (those are :mod:`tests.docs.limits`): the 70B-dims Llama the view's pages are
measured on, the CLI's tolerances and exit codes."""

from __future__ import annotations

import re

from tests.docs import sources as s
from tests.docs.row import Figure

_CLI = "docs/cli.md"
_BROWSER = "tests/view/test_llm_browser.py"


def llama_layers() -> str:
    """Decoder layers of the 70B-dims Llama of the view's benchmark and browser tests (the same model)."""
    from benchmarks.models import LLAMA_70B_LAYERS

    assert s.option_default("benchmarks/view_load.py", "--layers") == str(LLAMA_70B_LAYERS)
    assert s.literal(_BROWSER, "STACK").endswith(f"\u00d7{LLAMA_70B_LAYERS}")
    return str(LLAMA_70B_LAYERS)


def expanded_block() -> str:
    """The block the view's benchmark expands (its page fragment)."""
    fragment = s.literal("benchmarks/view_load.py", "FRAGMENTS")["block 41 + graph of model"]
    found = re.match(r"#expand=layers\.(\d+)&", fragment)
    assert found, fragment
    return found.group(1)


def broken_pipe() -> tuple[str]:
    """What the broken-pipe exit code adds SIGPIPE to."""
    import signal

    from common.cli import app

    return (str(app.EXIT_BROKEN_PIPE - signal.SIGPIPE),)


def scale_floor() -> tuple[str]:
    """The least magnitude ``atol`` is scaled by (``common/pytree_compare.py``)."""
    floor, = s.in_source("common/pytree_compare.py", r"atol = atol \* max\(([\d.]+), _magnitude")
    return (f"{float(floor):g}",)


def newest_table() -> tuple[str]:
    """The newest torch minor version the library carries an operator table for."""
    minors = [p.stem.removeprefix("torch-") for p in (s.ROOT / "common" / "op_tables").glob("torch-*.json")]
    return (max(minors, key=lambda v: tuple(map(int, v.split(".")))),)


_LAYERS = [r"\*draw the (\d+) calls one by one\*", r"Llama with 70B dimensions \((\d+) layers, \d+ implementations",
           r"The (\d+)-layer Llama with Llama-3-70B dimensions", r"where its (\d+) calls drawn one by one",
           r"the 70B decoder's graph: (\d+) layers in one stack box", r"one stack box for its (\d+) calls"]
_BLOCK = [r"with block (\d+) and the `model` graph", r"with block (\d+) and both `model` graphs"]

FIGURES: list[Figure] = [
    *(Figure(_CLI, f"the 70B-dims Llama's layers ({i})", rx, lambda: (llama_layers(),))
      for i, rx in enumerate(_LAYERS)),
    *(Figure(_CLI, f"the block expanded ({i})", rx, lambda: (expanded_block(),)) for i, rx in enumerate(_BLOCK)),
    Figure(_CLI, "the block and the decoder expanded", r"with block (\d+) expanded and the (\d+)-layer `model` graph",
           lambda: (expanded_block(), llama_layers())),
    Figure(_CLI, "the view benchmark's runs", r"\(page's own measure, median of (\d+); `benchmarks/results-view\.md`",
           lambda: s.view("runs")),
    Figure(_CLI, "broken pipe", r"no error \((\d+) \+ SIGPIPE, as for any Unix tool\)", broken_pipe),
    Figure(_CLI, "the demo's FlatIR tolerance", r"the executed FlatIR is off by more than (\S+) \(it runs ATen ops",
           lambda: s.in_source("common/cli/demo.py", r"flat_diff <= ([\de.-]+) and")),
    Figure(_CLI, "the 70B root's zoom", r"its root's graph centred at zoom (\d+) \(with the decoder drawn",
           lambda: s.in_source(_BROWSER, r"assert zoom == (\d+) and view\[0\] < 0")),
    Figure(_CLI, "verify's scale floor", r"scaled by each compared tensor's largest magnitude \(at least (\d+);",
           scale_floor),
    Figure(_CLI, "the view's plumbing", r"\*show plumbing \((\d+)\)\* draws it",
           lambda: s.in_source(_BROWSER, r'">show plumbing \((\d+)\)<"')),
    *(Figure("README.md", f"the newer torch ({i})", rx, newest_table) for i, rx in enumerate([
        r"\*\*torch (\d+\.\d+) is supported, tested less\.\*\*", r"and 3 were fixed: (\d+\.\d+)'s fake `to_mkldnn`",
        r"found the one change of (\d+\.\d+) that made rebuilds silently different"])),
    Figure("README.md", "the pinned minor", r"no other (\d+\.\d+) release is tested", lambda: s.minor("torch")),
    Figure("README.md", "dropout on torch 2.14", r"rebuilt as `dropout \+ dropout`: ([\d.]+) off in train mode",
           lambda: s.in_source("tests/torch2ir/test_dropout_identity.py",
                               r"silently different in train mode \(([\d.]+) on the first")),
]
