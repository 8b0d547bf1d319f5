"""The first ``generate()`` of a process on a rebuilt decoder: how many decoding steps the forward budget probes,
and what that costs per token, with and without the probe on symbolic sizes (issue 52;
:mod:`ir2torch.run_safety.symbolic_probe`).

Every decoding step has a new past length, so a new input signature. Without the symbolic probe, the default
rebuild probes each one on fake tensors before it runs. With it, two probed steps are followed by one probe on
symbolic sizes, which covers the later steps its guards allow. For each model (the small configs of
``benchmarks/generate.py``, random weights, nothing downloaded), batch and cache, each variant is a fresh rebuild
with the default budgets (after a throwaway rebuild's 4-token first run, which pays the process's one-time costs),
and its first ``generate()`` is timed as a whole: the prompt step, ``tokens`` new tokens,
and every probe. That time per new token is then divided by the original model's steady per-token time (the median
step of a later run, on the same clock). The probes are counted by wrapping ``ForwardBudget._probe`` and
``SymbolicCovers.learn``. The tokens of both variants are compared with the original's. The clock is the thread's
CPU time with one torch thread, as in ``benchmarks/generate.py``::

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/first_generate.py                 # all models, 24 and 128 tokens
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/first_generate.py llama --tokens 64

No threshold is asserted here (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks import generate as gen
from benchmarks import results_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@contextlib.contextmanager
def _counted(symbolic: bool) -> Iterator[dict[str, int]]:
    """Count the concrete and symbolic probes; ``symbolic=False``: the symbolic probe switched off (as before)."""
    from ir2torch.run_safety import forward_budget, symbolic_probe

    counts = {"probes": 0, "symbolic": 0}
    probe, learn, try_ = forward_budget.ForwardBudget._probe, symbolic_probe.SymbolicCovers.learn, \
        symbolic_probe._probe

    def counting_probe(self: Any, *args: Any, **kwargs: Any) -> bool:
        counts["probes"] += 1
        return probe(self, *args, **kwargs)

    def counting_try(*args: Any, **kwargs: Any) -> Any:
        counts["symbolic"] += 1
        return try_(*args, **kwargs)

    forward_budget.ForwardBudget._probe = counting_probe
    symbolic_probe._probe = counting_try
    if not symbolic:
        symbolic_probe.SymbolicCovers.learn = lambda self, *args, **kwargs: None
    try:
        yield counts
    finally:
        forward_budget.ForwardBudget._probe, symbolic_probe.SymbolicCovers.learn = probe, learn
        symbolic_probe._probe = try_


def measure(name: str, batch: int, cache: str, tokens: int, prompt: int) -> dict[str, Any]:
    import ir2torch
    from ir2torch.generation import for_generation

    original, ir = gen._converted(name, gen.models()[name])
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, original.config.vocab_size, (batch, prompt), generator=generator)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[1:, : prompt // 2] = 0
        ids[mask == 0] = 0
    row: dict[str, Any] = {"model": name, "batch": batch, "cache": cache, "tokens": tokens}
    with torch.inference_mode():
        gen._generate(original, ids, mask, tokens, cache)
        steps, expected = gen._generate(original, ids, mask, tokens, cache)
        row["original_ms"] = statistics.median(steps) * 1e3
        # a throwaway rebuild's short first run: what any first call of the process pays once (lazy imports, fake
        # kernels' caches) is paid here, not by whichever variant is timed first
        warm = for_generation(ir2torch.convert(ir, original.state_dict()), original.config, original.generation_config)
        gen._generate(warm, ids, mask, 4, cache)
        for key, symbolic in (("before", False), ("after", True)):
            rebuilt = for_generation(ir2torch.convert(ir, original.state_dict()), original.config,
                                     original.generation_config)
            with _counted(symbolic) as counts:
                start = gen.CLOCK[0]()
                _, out = gen._generate(rebuilt, ids, mask, tokens, cache)
                row[f"{key}_ms"] = (gen.CLOCK[0]() - start) * 1e3 / tokens
            row[f"{key}_probes"], row[f"{key}_symbolic"] = counts["probes"], counts["symbolic"]
            row[f"{key}_equal"] = torch.equal(out, expected)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | batch | cache | new tokens | original ms/token | probes before | first run before, ms/token "
            "| ratio | probes after (symbolic) | first run after, ms/token | ratio | tokens equal |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = [
        f"| {r['model']} | {r['batch']} | {r['cache']} | {r['tokens']} | {r['original_ms']:.2f} | "
        f"{r['before_probes']} | {r['before_ms']:.2f} | {r['before_ms'] / r['original_ms']:.1f}x | "
        f"{r['after_probes']} ({r['after_symbolic']}) | {r['after_ms']:.2f} | {r['after_ms'] / r['original_ms']:.1f}x "
        f"| {'yes' if r['before_equal'] and r['after_equal'] else 'no'} |" for r in rows]
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models (default: all of benchmarks/generate.py)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--cache", nargs="+", choices=["dynamic", "static"], default=["dynamic", "static"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[24, 128], help="new tokens of the first run")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-first-generate.md"),
                        help=results_file.output_help("results-first-generate.md"))
    ns = parser.parse_args(argv)
    torch.set_num_threads(1)
    gen.CLOCK[0] = time.thread_time
    load = os.getloadavg()[0]
    rows = [measure(name, batch, cache, tokens, ns.prompt) for name in (ns.names or list(gen.models()))
            for batch in ns.batch for cache in ns.cache for tokens in ns.tokens]
    body = ("1 thread, prompt 16; each first run is a fresh default rebuild's first `generate()`, timed whole (prompt "
            "step, probes and every new token: thread CPU time) and divided by its new tokens; ratio: against the "
            "original's median step.\n\n" + table(rows))
    results_file.write(ns.output, "The first generate() of a process: probes and cost per token", sys.argv[1:],
                       load, body)


if __name__ == "__main__":
    main()
