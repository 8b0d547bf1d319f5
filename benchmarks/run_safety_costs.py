"""What the run-time checks cost on a tiny BERT forward (issue 50): each bound of ``ir2torch.run_safety`` against
the same rebuilt model run bare.

Usage::

    python benchmarks/run_safety_costs.py                  # tiny BERT (2 layers), batch 1, 15 rounds
    python benchmarks/run_safety_costs.py --rounds 31 --models bert,llama

Candidates, timed interleaved in one process, single-threaded, under ``torch.no_grad()`` (see
:mod:`benchmarks.measure`; ratios are medians of per-round ratios against the bare rebuild):

- ``eager``: the original model;
- ``bare``: the rebuilt model with every forward budget taken off its modules (not something a user can ask for,
  the baseline of the budgets' cost; the checks generated code makes in the nodes that read indices stay: BERT's
  embedding leaves run under the data checks);
- ``default``: ``ir2torch.convert(ir, state)``: memory and FLOPs probed at the first call of a signature; later
  calls check the data preconditions only in the nodes that need them (``ir2torch.run_safety.node_checks``);
- ``no budgets``: ``max_bytes=None, max_flops=None``: the same node checks, and modules whose graph writes in
  place run op by op (the writes check);
- ``checked``: every call run as a call whose sizes depend on data does (the probe cannot finish): each op measured
  on fake tensors right before it runs, against the live memory of the call.

The first call's probe (fresh rebuilds, first call minus second) is timed on its own. Prints a Markdown table;
asserts nothing.
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

CANDIDATES = ("eager", "bare", "default", "no_budgets", "checked")


def _bare(module: torch.nn.Module) -> torch.nn.Module:
    from ir2torch.run_safety.forward_budget import BUDGET_ATTR

    for m in module.modules():
        m.__dict__.pop(BUDGET_ATTR, None)
    return module


def _always_checked(module: torch.nn.Module, args: tuple, kwargs: dict) -> torch.nn.Module:
    """``module`` whose calls with these arguments run checked, as when a size depends on data."""
    from ir2torch.run_safety.forward_budget import BUDGET_ATTR

    budget = module.__dict__[BUDGET_ATTR]
    budget.checked.add(None if budget.static else budget.key(args, kwargs))
    return module


def measure(name: str, batch: int, rounds: int) -> dict[str, Any]:
    import ir2torch
    import torch2ir

    model, args, kwargs = _model(name, batch)
    ir = torch2ir.convert(model, args, kwargs)
    state = model.state_dict()
    modules = {
        "eager": model,
        "bare": _bare(ir2torch.convert(ir, state).eval()),
        "default": ir2torch.convert(ir, state).eval(),
        "no_budgets": ir2torch.convert(ir, state, max_bytes=None, max_flops=None).eval(),
        "checked": _always_checked(ir2torch.convert(ir, state).eval(), args, kwargs),
    }
    series, probe = time_modules(modules, args, kwargs, rounds=rounds, reference="bare",
                                 fresh=lambda: ir2torch.convert(ir, state).eval())
    return {"model": name, **{f"{k}_ms": s.median * 1e3 for k, s in series.items()},
            **{f"{k}_ratio": paired_ratio(series, k, "bare") for k in CANDIDATES},
            "probe_ms": probe * 1e3}


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | eager | bare rebuild | default | `max_bytes=None, max_flops=None` | checked (data-dependent) "
            "| first-call probe |")
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        cells = [f"{r[f'{k}_ms']:.3f} ms ({r[f'{k}_ratio']:.2f}x)" for k in CANDIDATES]
        lines.append(f"| {r['model']} | " + " | ".join(cells) + f" | {r['probe_ms']:.1f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert", help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-run-safety.md"),
                        help=results_file.output_help("results-run-safety.md"))
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    body = table([measure(name, options.batch, options.rounds) for name in options.models.split(",")])
    results_file.write(options.output, "What the run-time checks cost (rebuilt forward, ms per pass)",
                       sys.argv[1:] if argv is None else argv, load, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
