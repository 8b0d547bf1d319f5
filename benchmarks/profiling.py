"""Where the time goes: cProfile of the operations whose targets the benchmarks report as missed.

Usage::

    python benchmarks/profiling.py convert gpt2            # torch2ir.convert vs torch.export.export
    python benchmarks/profiling.py convert llama7b --layers 8
    python benchmarks/profiling.py forward llama --batch 1  # rebuilt model vs eager, per forward pass
    python benchmarks/profiling.py rebuild                # GPT-2-small rebuilt on meta + .safetensors load

``convert`` splits a conversion into its phases by the cumulative time of the functions that
implement them (the eval-mode export, the train-mode export, the hierarchy, graph writing,
validation) next to a plain ``torch.export.export`` of the same model, and lists the top functions.
``forward`` counts the ATen ops each model dispatches per forward pass and shows the top functions
by own time over many passes (single thread). See ``benchmarks/PROFILE.md`` for the findings.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import os
import pstats
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks import models

warnings.filterwarnings("ignore")

#: Phases of ``torch2ir.convert``: label -> (file suffix, function name) whose cumulative time is the phase's.
PHASES: dict[str, tuple[str, str]] = {
    "torch2ir.convert (total)": ("torch2ir/converter.py", "convert"),
    "eval-mode export (frontend.export)": ("torch2ir/frontend/export.py", "export"),
    "train-mode pass, eager or exported (train_passes._train_trace)": ("torch2ir/train/passes.py", "_train_trace"),
    "  of which the eager pass (train_record.record_train_ops)": ("torch2ir/train/record.py", "record_train_ops"),
    "train-randomness check (train_passes._check_train_randomness)": ("torch2ir/train/passes.py",
                                                                      "_check_train_randomness"),
    "signature tracepoint hooks (_export/wrappers.py)": ("torch/_export/wrappers.py", "__call__"),
    "hierarchy: frames and flows (Hierarchy.__init__)": ("torch2ir/hierarchy/recover.py", "__init__"),
    "graph writing (Hierarchy.build_graph)": ("torch2ir/hierarchy/recover.py", "build_graph"),
    "validation (common.validate.validate)": ("common/validate.py", "validate"),
}


def _stats(profile: cProfile.Profile) -> dict[tuple[str, int, str], tuple]:
    return pstats.Stats(profile).stats  # type: ignore[attr-defined]


def _cumulative(stats: dict, suffix: str, name: str) -> tuple[float, int]:
    """Cumulative seconds and primitive call count of the functions named ``name`` in files ending in ``suffix``.

    Functions that call one another (``torch2ir.convert`` -> ``Torch2Ir.convert``) are not added up: the
    outermost one (largest cumulative time) counts, with the call count of that function.
    """
    found = [(cum, prim) for (filename, _, func), (prim, _ncalls, _tt, cum, _callers) in stats.items()
             if func == name and filename.replace(os.sep, "/").endswith(suffix)]
    return max(found) if found else (0.0, 0)


def _top(profile: cProfile.Profile, sort: str, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats(sort).print_stats(limit)
    lines = [ln.replace(str(Path(torch.__file__).parent.parent) + "/", "") for ln in out.getvalue().splitlines()]
    return "\n".join(ln for ln in lines if ln.strip())


def _profile(fn: Callable[[], Any], repeat: int = 1) -> cProfile.Profile:
    fn()  # warm-up: lazy imports, caches
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeat):
        fn()
    profile.disable()
    return profile


def _model(name: str, layers: int, batch: int) -> tuple[torch.nn.Module, tuple, dict]:
    if name == "llama7b":
        model = models.llama_7b(layers)
        return model, (torch.zeros((1, models.SCALE_SEQ), dtype=torch.long, device="meta"),), {}
    spec = models.SMALL[name]
    args, kwargs = spec.inputs(batch, None)
    return spec.build(None), args, kwargs


def profile_convert(name: str, layers: int, limit: int) -> None:
    """Phases of ``torch2ir.convert`` next to a plain export (cumulative seconds under cProfile)."""
    import torch2ir

    model, args, kwargs = _model(name, layers, 2)
    export = _profile(lambda: torch.export.export(model, args, kwargs, strict=False))
    convert = _profile(lambda: torch2ir.convert(model, args, kwargs))
    plain, _ = _cumulative(_stats(export), "torch/export/__init__.py", "export")
    stats = _stats(convert)
    print(f"## convert {name} (cProfile; times inflated by the profiler, compare them with each other)\n")
    print(f"plain torch.export.export: {plain:.3f} s\n")
    print("| phase | cumulative s | calls | / plain export |\n|---|---|---|---|")
    for label, (suffix, func) in PHASES.items():
        seconds, calls = _cumulative(stats, suffix, func)
        print(f"| {label} | {seconds:.3f} | {calls} | {seconds / plain:.2f}x |")
    exports, count = _cumulative(stats, "torch/export/__init__.py", "export")
    total, _ = _cumulative(stats, "torch2ir/converter.py", "convert")
    print(f"| torch.export.export, all calls | {exports:.3f} | {count} | {exports / plain:.2f}x |")
    print(f"| torch2ir's own code (total - exports) | {total - exports:.3f} | - | {(total - exports) / plain:.2f}x |")
    print(f"\n### top {limit} by cumulative time\n\n```\n{_top(convert, 'cumulative', limit)}\n```")


class _OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the ATen ops dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))


def profile_forward(name: str, batch: int, limit: int, passes: int = 200) -> None:
    """ATen ops per forward pass and top functions by own time: eager vs rebuilt vs ``ep.module()``."""
    import ir2torch
    import torch2ir

    torch.set_num_threads(1)
    model, args, kwargs = _model(name, 2, batch)
    rebuilt = ir2torch.convert(torch2ir.convert(model, args, kwargs), model.state_dict()).eval()
    exported = torch.export.export(model, args, kwargs, strict=False).module()
    candidates = {"eager": model, "rebuilt": rebuilt, "ep.module()": exported}
    print(f"## forward {name}, batch {batch} (1 thread, no_grad)\n")
    with torch.no_grad():
        counts = {}
        for label, fn in candidates.items():
            with _OpCounter() as counter:
                fn(*args, **kwargs)
            counts[label] = counter.counts
        base = counts["eager"]
        for label, count in counts.items():
            extra = {op: count[op] - base.get(op, 0) for op in set(count) | set(base) if count[op] != base.get(op, 0)}
            print(f"- {label}: {sum(count.values())} ATen ops per pass" + (f"; vs eager: {extra}" if extra else ""))
        for label in ("eager", "rebuilt"):
            fn = candidates[label]
            profile = _profile(lambda fn=fn: fn(*args, **kwargs), repeat=passes)
            print(f"\n### {label}: top {limit} by own time over {passes} passes\n\n```\n"
                  f"{_top(profile, 'tottime', limit)}\n```")


def profile_rebuild(layers: int, limit: int) -> None:
    """``ir2torch.convert(ir, file.safetensors, device="meta")`` of GPT-2-small dimensions: top functions."""
    import tempfile

    import ir2torch
    import torch2ir
    from common.state_dict import save_safetensors

    config = models.gpt2_small_config(layers)
    with tempfile.TemporaryDirectory(prefix="t2i-profile-") as tmp:
        original = models.gpt2_small(config)
        path = save_safetensors(original.state_dict(), Path(tmp) / "gpt2.safetensors")
        ir = torch2ir.convert(original, (torch.zeros((1, models.SCALE_SEQ), dtype=torch.long),))
        del original
        profile = _profile(lambda: ir2torch.convert(ir, path, device="meta"), repeat=3)
    total, _ = _cumulative(_stats(profile), "ir2torch/converter.py", "convert")
    print(f"## rebuild + load, GPT-2 dims, {layers} layers: {total / 3:.3f} s per call under cProfile\n")
    print(f"### top {limit} by cumulative time (3 calls)\n\n```\n{_top(profile, 'cumulative', limit)}\n```")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("convert", "forward", "rebuild"))
    parser.add_argument("model", nargs="?", default="gpt2",
                        help=f"one of {', '.join(models.SMALL)}, or llama7b (convert only, on meta); "
                        "rebuild always uses GPT-2-small dimensions")
    parser.add_argument("--layers", type=int, default=None,
                        help="decoder layers of llama7b (default 8) or of GPT-2 for rebuild (default 12)")
    parser.add_argument("--batch", type=int, default=1, help="batch size of the forward profile (default 1)")
    parser.add_argument("--limit", type=int, default=25, help="functions listed (default 25)")
    args = parser.parse_args(argv)
    if args.what == "convert":
        profile_convert(args.model, args.layers or 8, args.limit)
    elif args.what == "forward":
        profile_forward(args.model, args.batch, args.limit)
    else:
        profile_rebuild(args.layers or models.GPT2_SMALL["n_layer"], args.limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
