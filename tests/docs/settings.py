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


def quick_rounds() -> tuple[str]:
    """The fewest and most rounds of ``benchmarks/run.py --quick``'s scenarios."""
    rounds = [params["rounds"] for params in s.literal("benchmarks/run.py", "QUICK").values()]
    return (f"{min(rounds)}-{max(rounds)}",)


def sample_ms() -> tuple[str]:
    """The time ``benchmarks/measure.py`` calibrates one sample of many calls to, in ms."""
    target, = s.in_source("benchmarks/measure.py", r"def calibrate\(.*?target: float = ([\d.]+)")
    return (f"{float(target) * 1000:g} ms",)


def _threads(path: str) -> tuple[str]:
    return s.in_source(path, r"torch\.set_num_threads\((\d+)\)")


def _versions() -> tuple[str, str]:
    from common.serialize import FORMAT_VERSION, PLAIN_FORMAT_VERSION

    return str(FORMAT_VERSION), str(PLAIN_FORMAT_VERSION)


def frontier_met() -> tuple[str]:
    """Whether the DeepSeek-V3 run met the issue's targets (the page's limits, against the results file's row)."""
    row = s.table("results-moe-frontier.md")[0]
    met = (float(row["convert/export"].removesuffix("x")) <= 0.2 and float(row["IR file"].removesuffix(" MB")) <= 1
           and float(row["`IR.load`"].removesuffix(" s")) <= 0.1
           and float(row["rebuild on meta"].removesuffix(" s")) <= 1)
    return ("met" if met else "not met",)


def forward_diffs() -> tuple[str]:
    """The largest max abs diff of the forward table (``benchmarks/results.md``), every column."""
    rows = s.table("results.md", "## forward: rebuilt vs eager")
    column = next(c for c in rows[0] if c.startswith("max abs diff"))
    return (f"{max(float(v) for r in rows for v in r[column].split(' / ')):g}",)


def corpus_batches() -> tuple[str, str]:
    """The batches ``benchmarks/corpus.py`` runs each model at by default."""
    batches, = s.in_source("benchmarks/corpus.py", r'add_argument\("--batches", default="([\d,]+)"\)')
    return tuple(batches.split(","))


def _impls_power() -> tuple[str]:
    """The implementations of ``benchmarks/large_files.py``'s document, as a power of ten."""
    impls = s.option_default("benchmarks/large_files.py", "--impls")
    assert impls.startswith("10**"), impls
    return (impls.removeprefix("10**"),)


_PERF = "docs/performance.md"
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
    Figure(_PERF, "quick run's rounds", r"GPT-2 only for forward\), (\d+-\d+) rounds, the scale", quick_rounds),
    Figure(_PERF, "a sample's length", r"many calls per sample \(about (\d+ ms) each\)", sample_ms),
    *(Figure(_PERF, f"threads: {path}", rx, lambda path=path: _threads(path)) for path, rx in [
        ("benchmarks/scenarios.py", r"### Forward \((\d+) thread, ms per pass\)"),
        ("benchmarks/guards.py", r"### Input guards \((\d+) thread, ms per pass\)"),
        ("benchmarks/forward_budget.py", r"### The forward's memory budget \(issue 28; (\d+) thread, ms per pass\)"),
        ("benchmarks/run_safety_costs.py", r"### What the run-time checks cost \(issue 50; tiny BERT, (\d+) thread, ms "
                                           r"per pass\)")]),
    Figure(_PERF, "shared bodies' format versions",
           r"saves the IR \(format (\d+): each group of alike .*? and the same IR as format (\d+) would write it",
           _versions),
    *(Figure(_PERF, f"format 1 ({i})", rx, lambda: _versions()[1:]) for i, rx in enumerate([
        r"Earlier runs \(format (\d+) against shared bodies", r"0\.51-1\.32 s more\. Format (\d+) files"])),
    Figure(_PERF, "DeepSeek-V3's targets",
           r"\(convert at most 0\.2x one export, file at most 1 MB, load at most 0\.1 s, rebuild on meta at most 1 "
           r"s\): (met|not met)\.", frontier_met),
    Figure(_PERF, "forward's differences", r"All outputs are identical to eager \(max abs diff (\S+)\)\.",
           forward_diffs),
    Figure(_PERF, "the corpus run's batches", r"opt-ins\): batch (\d+) \(`x\[:1\]` of every tensor input\) and batch "
           r"(\d+) \(that row repeated", corpus_batches),
    Figure(_PERF, "large files' implementations", r"Loading and rebuilding 10\*\*(\d+) implementations in one call",
           _impls_power),
    Figure(_PERF, "small configs' batch", r"token ids \(batch (\d+), \d+ tokens\)",
           lambda: s.in_source("benchmarks/scenarios.py", r"args, kwargs = spec\.inputs\((\d+), None\)")),
    Figure("docs/concepts.md", "a root of many calls", r"what it saves on a root calling 10\*\*(\d+) modules",
           lambda: s.in_source("benchmarks/PROFILE.md", r"the root of 10\*\*(\d+) calls went from")),
    Figure("docs/supported.md", "assert_roundtrip's tolerance", r"outputs equal \(max abs diff <= (\S+); in practice",
           lambda: s.in_source("common/testing/roundtrip.py", r"\n +atol: float = ([\de.-]+),\n")),
    Figure("docs/limitations.md", "format versions",
           r"`UnsupportedFormatVersionError` \(format (\d+)\); a file without repeated blocks is still written as "
           r"format (\d+)", _versions),
]
