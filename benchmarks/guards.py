"""What the input guard costs: rebuilt forward with and without it, vs eager (issue #13, point 7).

Usage::

    python benchmarks/guards.py                    # BERT, Llama (small configs), the test zoo's ConvNet
    python benchmarks/guards.py --rounds 30 --models bert

For each model: the eager model, the rebuilt model with its guard (the default) and without it
(``ir2torch.convert(..., guard_inputs=False)``) are timed interleaved in one process, single-threaded,
under ``torch.no_grad()``, many calls per sample (see :mod:`benchmarks.measure`); ratios are medians of
per-round ratios. The guard's own cost is also timed alone (its graph node and its pre-hook, per call).
Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from benchmarks import models, results_file
from benchmarks.measure import calibrate, interleaved, paired_ratio

MODELS = ("bert", "llama", "conv_net")


def _model(name: str, batch: int) -> tuple[nn.Module, tuple, dict]:
    if name == "conv_net":  # the test zoo's ConvNet (3x32x32 images)
        from tests.models.zoo import by_name

        case = by_name("conv_net")
        model = case.build()
        args, kwargs = case.inputs()
        return model, args, kwargs
    spec = models.SMALL[name]
    args, kwargs = spec.inputs(batch, None)
    return spec.build(None), args, kwargs


def _per_call(fn: Callable[[], Any], number: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def measure(name: str, batch: int, rounds: int) -> dict[str, Any]:
    """Times of one model: eager, rebuilt with and without the guard, and the guard alone."""
    import ir2torch
    import torch2ir

    model, args, kwargs = _model(name, batch)
    ir = torch2ir.convert(model, args, kwargs)
    guarded = ir2torch.convert(ir, model.state_dict()).eval()
    plain = ir2torch.convert(ir, model.state_dict(), guard_inputs=False).eval()
    guard = guarded.meta["input_guard"]
    leaves = [v for v in torch.utils._pytree.tree_leaves((args, kwargs))]
    modules = {"eager": model, "guarded": guarded, "unguarded": plain}
    with torch.no_grad():
        calls = {k: (lambda m=m: m(*args, **kwargs)) for k, m in modules.items()}
        number = calibrate(calls["eager"])
        series = interleaved(calls, rounds=rounds, warmup=2, number=number)
    return {
        "model": name, "inputs": ", ".join(f"{tuple(t.shape)}" for t in leaves if isinstance(t, torch.Tensor)),
        **{f"{k}_ms": s.median * 1e3 for k, s in series.items()},
        "guarded_vs_eager": paired_ratio(series, "guarded", "eager"),
        "unguarded_vs_eager": paired_ratio(series, "unguarded", "eager"),
        "guarded_vs_unguarded": paired_ratio(series, "guarded", "unguarded"),
        "node_us": _per_call(lambda: guard(*leaves)) * 1e6,
        "hook_us": _per_call(lambda: guard.check_call(guarded, args, kwargs)) * 1e6,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of :func:`measure` rows."""
    head = ("| model | inputs | eager ms | rebuilt ms | rebuilt, no guard ms | rebuilt / eager | "
            "no guard / eager | guard / no guard | guard node us | pre-hook us |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['inputs']} | {r['eager_ms']:.3f} | {r['guarded_ms']:.3f} | {r['unguarded_ms']:.3f} "
            f"| {r['guarded_vs_eager']:.3f}x | {r['unguarded_vs_eager']:.3f}x | {r['guarded_vs_unguarded']:.3f}x "
            f"| {r['node_us']:.1f} | {r['hook_us']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--batch", type=int, default=1, help="batch of the text models (default 1)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-guards.md"),
                        help=results_file.output_help("results-guards.md"))
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    rows = [measure(name, options.batch, options.rounds) for name in options.models.split(",")]
    body = table(rows)
    results_file.write(options.output, "What the input guard costs (rebuilt forward with and without it, vs eager)",
                       sys.argv[1:] if argv is None else argv, load, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
