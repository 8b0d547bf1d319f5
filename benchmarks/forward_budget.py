"""What the forward's memory budget costs (issue 28): steady-state calls and the first call's probe.

Usage::

    python benchmarks/forward_budget.py                    # BERT, Llama (small configs), the test zoo's ConvNet
    python benchmarks/forward_budget.py --rounds 30 --models bert

For each model: the eager model, the rebuilt model with its forward budget (the default, ``max_bytes=
"available"``) and without it (``max_bytes=None``) are timed interleaved in one process, single-threaded, under
``torch.no_grad()``, many calls per sample (see :mod:`benchmarks.measure`); ratios are medians of per-round
ratios. The probe (the first call of a new input signature, run on fake tensors before the real call) is timed
separately, on fresh rebuilds, against one eager call. Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks import results_file
from benchmarks.guards import MODELS, _model
from benchmarks.measure import paired_ratio, time_modules


def measure(name: str, batch: int, rounds: int) -> dict[str, Any]:
    """Times of one model: eager, rebuilt with and without the budget, and the first call's probe."""
    import ir2torch
    import torch2ir

    model, args, kwargs = _model(name, batch)
    ir = torch2ir.convert(model, args, kwargs)
    budgeted = ir2torch.convert(ir, model.state_dict()).eval()
    plain = ir2torch.convert(ir, model.state_dict(), max_bytes=None).eval()
    modules = {"eager": model, "budget": budgeted, "no_budget": plain}
    series, probe = time_modules(modules, args, kwargs, rounds=rounds, reference="eager",
                                 fresh=lambda: ir2torch.convert(ir, model.state_dict()).eval())
    return {
        "model": name, **{f"{k}_ms": s.median * 1e3 for k, s in series.items()},
        "budget_vs_eager": paired_ratio(series, "budget", "eager"),
        "no_budget_vs_eager": paired_ratio(series, "no_budget", "eager"),
        "budget_vs_no_budget": paired_ratio(series, "budget", "no_budget"),
        "probe_ms": probe * 1e3,
        "probe_vs_eager": probe / series["eager"].median,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of :func:`measure` rows."""
    head = ("| model | eager ms | rebuilt ms | rebuilt, max_bytes=None ms | rebuilt / eager | None / eager | "
            "budget / None | first-call probe ms | probe / eager call |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['eager_ms']:.3f} | {r['budget_ms']:.3f} | {r['no_budget_ms']:.3f} "
            f"| {r['budget_vs_eager']:.3f}x | {r['no_budget_vs_eager']:.3f}x | {r['budget_vs_no_budget']:.3f}x "
            f"| {r['probe_ms']:.1f} | {r['probe_vs_eager']:.0f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--batch", type=int, default=1, help="batch of the text models (default 1)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-forward-budget.md"),
                        help=results_file.output_help("results-forward-budget.md"))
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    rows = [measure(name, options.batch, options.rounds) for name in options.models.split(",")]
    body = table(rows)
    results_file.write(options.output, "What the forward's memory budget costs (rebuilt forward with and without it)",
                       sys.argv[1:] if argv is None else argv, load, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
