"""Rows of :data:`tests.docs.figures.FIGURES` for what docs/performance.md tells of past changes (before and after):
each figure is read from the record its run was kept in when it was measured (``benchmarks/PROFILE.md``, the dated
profile log of those changes, or the header of a results file naming the run before), so the page cannot drift
from the record. These are records, not figures a rerun re-derives."""

from __future__ import annotations

import re

from tests.docs import sources as s
from tests.docs.row import Figure

_PERF = "docs/performance.md"
_PROFILE = "benchmarks/PROFILE.md"


def profile(pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` in ``benchmarks/PROFILE.md`` (one match, or matches that read the same)."""
    return s.in_source(_PROFILE, pattern)


def conversion_before() -> tuple[str, str]:
    """The baseline run's convert / export range, as the page rounds it (one decimal)."""
    low, high = profile(r"\| convert <= 1\.15x export \| ([\d.]+)-([\d.]+)x \|")
    return f"{float(low):.1f}", f"{float(high):.1f}x"


def lean_step() -> tuple[str, str]:
    """The corpus median once / export before ``lean_export`` (the results file's header) and now."""
    before, = s.in_source("benchmarks/results-trace-once-corpus.md", r"before `lean_export`.*?had once/export median\n"
                          r"([\d.]+x),")
    return before, s.trace_once_corpus()[2]


def _once(entry: str) -> str:
    return s.cell("results-trace-once-corpus.md", None, entry, "once/export") + "x"


def before_lean() -> tuple[str, str, str]:
    """The run before ``lean_export`` (the results file's header): entries at or below 1.05x, of how many, median
    and max once / export."""
    median, most, within, of = s.in_source("benchmarks/results-trace-once-corpus.md", r"had once/export median\n"
                                           r"([\d.]+x), max ([\d.]+x), (\d+) of (\d+) at or below 1\.05x")
    return within, median, str(int(of) - int(within)), most


def small_above() -> tuple[str]:
    """Entries above 1.05x of their lean export whose lean export takes under 250 ms."""
    rows = s.table("results-trace-once-corpus.md")
    return (str(sum(float(r["once/lean"]) > 1.05 and float(r["lean export"]) < 0.25 for r in rows)),)


def _layers(name: str) -> tuple[str]:
    from benchmarks import models

    return (str(getattr(models, name)),)


def _rows() -> list[Figure]:
    rows = [
        ("the baseline's conversion", r"\*\*Conversion \(was ([\d.]+)-([\d.]+x) export\)\.\*\*", conversion_before),
        ("torch2ir's own share", r"validation\) is (\d+-\d+%) of a plain export under cProfile",
         lambda: profile(r"validation\) is (\d+-\d+%) of a plain export")),
        ("preserved signatures", r"handled leaf was passed to `preserve_module_call_signature` \((\d+) of them on "
         r"the 7B Llama\)", lambda: profile(r", (\d+) on the 7B Llama\)")),
        ("preserved signatures' cost", r"walk the extra nodes; \+(\d+-\d+%) of an export\.",
         lambda: profile(r"on every handled leaf \(\+(\d+-\d+%)\)")),
        ("train-mode export's models", r"\(BERT, GPT-2, Llama, (\d+) of the (\d+) corpus architectures\)",
         lambda: profile(r"\(BERT, GPT-2, Llama, and (\d+) of the (\d+) corpus architectures\)")),
        ("train-mode export's cost", r"to read each dropout's `p`: \+(\d+-\d+%)\.",
         lambda: profile(r"a second, train-mode `torch\.export` \(\+(\d+-\d+%)\)")),
        ("the meta train pass", r"\(`torch2ir\.train\.record`, about (\d+%) of an export on",
         lambda: profile(r"the meta train run \(~(\d+%) of an export")),
        ("the meta pass on CNNs", r"the pass costs (\d+-\d+%) of an export, so ResNet",
         lambda: profile(r"Running the pass unconditionally cost (\d+-\d+%) of an export")),
        ("lean export in the history", r"the corpus median went from ([\d.]+x) to ([\d.]+x) of a plain export",
         lean_step),
        ("the baseline's forward", r"\*\*Forward \(was ([\d.]+-[\d.]+x) eager on (\d+) of (\d+)\)\.\*\*",
         lambda: profile(r"\| forward rebuilt <= 1\.05x eager \| ([\d.]+-[\d.]+x) on (\d+) of (\d+) \|")),
        ("metadata asserts", r"`aten\._assert_tensor_metadata` per `\.to\(\)` \((\d+) per Llama pass\)",
         lambda: profile(r"the extra (\d+) all `aten\._assert_tensor_metadata")),
        ("Python frames per op", r"a Python frame per op \((\d+) per Llama pass\)",
         lambda: profile(r"OpOverload\.__call__\)` \((\d+) per pass\)")),
        ("one compile per graph module", r"\(rebuild \+ load ([\d.]+x) -> ([\d.]+x)\)",
         lambda: profile(r"original class \+ `load_state_dict`, GPT-2 124M \| <= 0\.1x \| ([\d.]+x) \| ([\d.]+x) \(")),
        ("code at first use, measured", r"on the root of 10\*\*(\d+) calls, that took its rebuild from ([\d.]+ s) to "
         r"([\d.]+ s) \(its fx graph\), and its first call pays about (\d+ s) \(([\d.]+ s) of source, ([\d.]+ s) of "
         r"`compile`\)",
         lambda: profile(r"the root of 10\*\*(\d+) calls went from ([\d.]+ s) to ([\d.]+ s) of rebuild \(its fx graph"
                         r"\), and pays about (\d+ s) \(([\d.]+ s)\n +of source, ([\d.]+ s) of `compile`\)")),
        ("nested groups", r"\(DeBERTa's conversion now takes ([\d.]+x) of its export, Falcon's ([\d.]+x), PhiMoE's "
         r"([\d.]+x)\)\.", lambda: (_once("deberta"), _once("falcon"), _once("phimoe"))),
        ("the run before lean export", r"The step before, the same day \(to (\d+) entries at or below 1\.05x, median "
         r"([\d.]+x)\)", lambda: before_lean()[:2]),
        ("above 1.05x before lean export", r"Before `lean_export` \(2026-11-28\), (\d+) entries were above 1\.05x: "
         r".*?\(ConvNeXt with DropPath ([\d.]+x),", lambda: before_lean()[2:]),
        ("small entries above 1.05x", r"entries above 1\.05x, (\d+) of them small models whose lean export takes under "
         r"250 ms\)", small_above),
        ("70B dims' layers", r"at Llama-3-70B dimensions \((\d+) layers; with `ir\.lower\(\)`",
         lambda: _layers("LLAMA_70B_LAYERS")),
        ("7B dims' layers", r"at Llama-2-7B dimensions \((\d+) layers; with `ir\.lower\(\)`",
         lambda: _layers("LLAMA_7B_LAYERS")),
        ("a shared instance's line", r"only with one line per instance \(about (\d+) bytes\)",
         lambda: profile(r"line per instance \(about (\d+) bytes\)")),
        ("shared bodies' runs", r"times `IR\.load` and a rebuild on `meta` of each \(medians of (\d+), one process\)",
         lambda: (s.option_default("benchmarks/shared_bodies.py", "--runs"),)),
    ]
    return [Figure(_PERF, what, pattern, source) for what, pattern, source in rows]


FIGURES: list[Figure] = _rows()
assert all(re.compile(f.pattern) for f in FIGURES)
