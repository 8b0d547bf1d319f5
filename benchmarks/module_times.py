"""Forward time per module, as an overlay for the view (``ir2torch view --overlay``).

Usage::

    python benchmarks/module_times.py bert --hf -i 1,16:int64 -o bert.times.json
    python benchmarks/module_times.py bert --hf -i 1,16:int64 --rebuilt -o bert.rebuilt.times.json
    ir2torch view bert.ir.json --overlay bert.times.json --overlay-name "forward ms"

The model is given as to ``torch2ir convert`` (a ``module:factory`` spec, or a transformers model type with
``--hf``). Every module gets a forward pre-hook and a forward hook that read ``time.perf_counter``; a module's
time is its inclusive time (its children's included) summed over its calls in one forward pass, in ms; the
overlay holds the median over ``--runs`` passes after ``--warmup`` passes, one thread. With ``--rebuilt`` the
model is converted and rebuilt first and the rebuild is timed (same module paths, so the two overlays compare
key by key). Keys are module paths, ``"root"`` for the model itself; the hooks add a few microseconds per call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn


def module_times(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, *, runs: int = 5,
                 warmup: int = 1) -> dict[str, float]:
    """``{module path: ms}`` (``"root"`` for ``model``): each module's inclusive forward time summed over its calls
    in one pass, median over ``runs`` passes (after ``warmup``), under ``torch.no_grad``."""
    kwargs = kwargs or {}
    starts: dict[int, list[float]] = {}
    totals: dict[str, float] = {}
    names = {id(m): n or "root" for n, m in model.named_modules()}  # a shared module: its first path

    def pre(module: nn.Module, _: Any) -> None:
        starts.setdefault(id(module), []).append(time.perf_counter())

    def post(module: nn.Module, _: Any, __: Any) -> None:
        began = starts[id(module)].pop()
        name = names[id(module)]
        totals[name] = totals.get(name, 0.0) + (time.perf_counter() - began) * 1e3

    handles = []
    for module in {id(m): m for _, m in model.named_modules()}.values():
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post, always_call=True))
    samples: dict[str, list[float]] = {}
    try:
        with torch.no_grad():
            for i in range(warmup + runs):
                totals.clear()
                model(*args, **kwargs)
                if i >= warmup:
                    for name, ms in totals.items():
                        samples.setdefault(name, []).append(ms)
    finally:
        for handle in handles:
            handle.remove()
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> None:
    from common.cli.model import add_model_arguments, model_and_inputs

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, positional=True, meta=False)
    parser.add_argument("-o", "--output", required=True, help="the overlay JSON to write")
    parser.add_argument("--rebuilt", action="store_true", help="time the model rebuilt by ir2torch instead")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, args, kwargs = model_and_inputs(options)
    model.eval()
    if options.rebuilt:
        import ir2torch
        import torch2ir

        model = ir2torch.convert(torch2ir.convert(model, args, kwargs), model.state_dict()).eval()
    times = module_times(model, args, kwargs, runs=options.runs, warmup=options.warmup)
    Path(options.output).write_text(json.dumps(times, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    slowest = sorted(times.items(), key=lambda kv: -kv[1])[:5]
    print(f"wrote {options.output}: {len(times)} modules; slowest " + ", ".join(f"{k} {v:.3f} ms" for k, v in slowest))


if __name__ == "__main__":
    main()
