"""``convert(..., trace_once=...)`` (on by default) against ``trace_once=False``: equality on the corpus, and timing
on Llama-3-70B dimensions.

    python -m benchmarks.trace_once check llama,bert [layer_idx]   # IR equal to a full trace, outputs exact
    python -m benchmarks.trace_once time 3 8,32,80                 # interleaved: export, convert, trace_once
    python -m benchmarks.trace_once corpus 3 [bert,llama]          # the same on corpus entries (default: all)

``check`` prints one JSON line per corpus entry; ``time`` prints one line per run, then a table of medians;
``corpus`` one line per entry (medians and ratios to export), then the distribution of the ratios.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

#: what ``trace_once=`` is given in the timing: ``True`` (Llama's layers differ by ``layer_idx`` only: watched)
TRACE_ONCE = True


def _diffs(full: Any, once: Any) -> list[tuple[str, list[str]]]:
    a, b = full.to_dict(), once.to_dict()
    out = [(k, sorted(f for f in set(a.get(k, {})) | set(b.get(k, {})) if a.get(k, {}).get(f) != b.get(k, {}).get(f)))
           for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if full.tensors.keys() != once.tensors.keys():
        out.append(("tensors", sorted(set(full.tensors) ^ set(once.tensors))))
    return out


def check(names: list[str], trace_once: Any) -> None:
    """Convert each corpus entry with and without ``trace_once``; compare the IRs (every instance expanded) and
    the rebuilt model's outputs with the eager model's."""
    import ir2torch
    import torch2ir
    from tests.real.corpus import CORPUS

    arches = {a.name: a for a in CORPUS}
    for name in names:
        arch = arches[name]
        args, kwargs = arch.inputs()
        full = torch2ir.convert(arch.build().eval(), args, kwargs, allow=arch.allow, trace_once=False)
        model = arch.build().eval()  # a fresh model: a conversion can leave state behind (LeViT's bias cache)
        once = torch2ir.convert(model, args, kwargs, allow=arch.allow, trace_once=trace_once)
        lowered = _lowered_alike(full, once, model, args, kwargs, arch.allow)
        for impl in once.values():
            _ = impl.graph
        rebuilt = ir2torch.convert(once, model.state_dict(), allow=arch.allow).eval()
        with torch.no_grad():
            expected = pytree.tree_leaves(model(*args, **(kwargs or {})))
            got = pytree.tree_leaves(rebuilt(*args, **(kwargs or {})))
        exact = len(expected) == len(got) and all(
            torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(expected, got))
        print(json.dumps({"name": name, "ir_equal": once == full, "exact": exact, "lowered": lowered,
                          "diffs": _diffs(full, once)}), flush=True)


def _lowered_alike(full: Any, once: Any, model: Any, args: tuple, kwargs: Any, allow: Any) -> str:
    """``ir.lower()`` of the trace-once IR against the full trace's: ``"equal"`` (same ops in each module, same
    weights, meta and source links up to instances, outputs of both rebuilt FlatIRs bit-equal), ``"refused: ..."``
    (the capture names why), or what differs."""
    from collections import Counter

    import ir2torch
    from common.errors import IRError

    try:
        a = full.lower()
    except IRError:
        return "full trace not lowered"
    try:
        b = once.lower()
    except IRError as exc:
        return f"refused: {exc.message}"
    def ops(flat: Any) -> Counter:
        return Counter((n.op_type, n.module_path, n.source is None) for n in flat.nodes)

    if ops(a) != ops(b):
        return f"ops differ: {sorted((ops(a) - ops(b)).items())[:3]} / {sorted((ops(b) - ops(a)).items())[:3]}"
    if a.weight_name_mapping != b.weight_name_mapping or a.meta != b.meta:
        return "weights or meta differ"
    rebuilder = ir2torch.Ir2Torch()
    with torch.no_grad():
        out_a = pytree.tree_leaves(rebuilder.convert(a, model, allow=allow)(*args, **(kwargs or {})))
        out_b = pytree.tree_leaves(rebuilder.convert(b, model, allow=allow)(*args, **(kwargs or {})))
    if len(out_a) != len(out_b) or not all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                                           for x, y in zip(out_a, out_b)):
        return "outputs differ"
    return "equal"


def timing(rounds: int, layer_counts: list[int]) -> None:
    """Interleaved timing on ``llama_70b(layers)`` (meta): ``torch.export.export``, ``convert``, ``convert`` with
    ``trace_once``, the same followed by ``ir.lower()``; prints ``| layers | export | convert | trace_once | once +
    lower | convert/export | once/export | (once + lower)/export |`` (medians, seconds)."""
    import torch2ir

    from .models import SCALE_SEQ, llama_70b

    times: dict[tuple[int, str], list[float]] = {}
    for layers in layer_counts:
        model = llama_70b(layers=layers).eval()
        args = (torch.zeros((1, SCALE_SEQ), dtype=torch.long, device="meta"),)
        runs: list[tuple[str, Callable[[], Any]]] = [
            ("export", lambda m=model, a=args: torch.export.export(m, a, strict=False)),
            ("convert", lambda m=model, a=args: torch2ir.convert(m, a, trace_once=False)),
            ("trace_once", lambda m=model, a=args: torch2ir.convert(m, a, trace_once=TRACE_ONCE)),
            ("once+lower", lambda m=model, a=args: torch2ir.convert(m, a, trace_once=TRACE_ONCE).lower()),
        ]
        for _ in range(rounds):
            for label, run in runs:
                gc.collect()
                start = time.perf_counter()
                run()
                times.setdefault((layers, label), []).append(time.perf_counter() - start)
                print(layers, label, round(times[(layers, label)][-1], 2), flush=True)
    for layers in layer_counts:
        e, c, o, lo = (statistics.median(times[(layers, label)])
                       for label in ("export", "convert", "trace_once", "once+lower"))
        print(f"| {layers} | {e:.2f} | {c:.2f} | {o:.2f} | {lo:.2f} | {c / e:.2f} | {o / e:.2f} | {lo / e:.2f} |",
              flush=True)


def corpus(rounds: int, names: list[str] | None) -> None:
    """Interleaved per corpus entry: ``torch.export.export`` (non-strict, as torch2ir runs it), the same export
    without what the conversion's exports skip (:func:`torch2ir.frontend.export.lean_export`: per-node stack traces,
    eager
    source generation), ``convert`` and ``convert(trace_once=True)``; prints ``| entry | export | lean export |
    convert | once | convert/export | once/export | once/lean | stood in |`` (medians, seconds; ``stood in``: 1 when
    the trace-once export stood a traced block in for alike ones), then the median and maximum of each ratio."""
    import torch2ir
    from tests.real.corpus import CORPUS
    from torch2ir.frontend.export import lean_export

    def lean(m: Any, a: tuple, k: Any) -> Any:
        with lean_export():
            return torch.export.export(m, a, k, strict=False)

    rows = []
    reasons: dict[str, int] = {}
    for arch in CORPUS:
        if names and arch.name not in names:
            continue
        args, kwargs = arch.inputs()
        model = arch.build().eval()
        runs: list[tuple[str, Callable[[], Any]]] = [
            ("export", lambda m=model, a=args, k=kwargs: torch.export.export(m, a, k, strict=False)),
            ("lean", lambda m=model, a=args, k=kwargs: lean(m, a, k)),
            ("convert", lambda m=model, a=args, k=kwargs, w=arch.allow: torch2ir.convert(m, a, k, allow=w,
                                                                                           trace_once=False)),
            ("once", lambda m=model, a=args, k=kwargs, w=arch.allow: torch2ir.convert(m, a, k, allow=w,
                                                                                        trace_once=True)),
        ]
        times: dict[str, list[float]] = {}
        try:
            once = None
            for _ in range(rounds):
                for label, run in runs:
                    gc.collect()
                    start = time.perf_counter()
                    result = run()
                    times.setdefault(label, []).append(time.perf_counter() - start)
                    once = result if label == "once" else once
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a test
            print(f"| {arch.name} | failed: {type(exc).__name__}: {str(exc)[:80]} |", flush=True)
            continue
        capture = getattr(once, "capture", None)  # blocks stood in for others: copied when lowering, or refused
        instances = int(bool(getattr(capture, "copies", None)) or (getattr(capture, "refused", None) or ""
                                                                   ).startswith("alike blocks"))
        for _, why in getattr(getattr(once, "capture", None), "trace_once_fallbacks", []):
            reasons[why] = reasons.get(why, 0) + 1
        e, le, c, o = (statistics.median(times[label]) for label in ("export", "lean", "convert", "once"))
        rows.append((arch.name, e, c, o, instances, le))
        print(f"| {arch.name} | {e:.3f} | {le:.3f} | {c:.3f} | {o:.3f} | {c / e:.2f} | {o / e:.2f} | {o / le:.2f} "
              f"| {instances} |", flush=True)
    for label, index, base in (("convert/export", 2, 1), ("once/export", 3, 1), ("once/lean export", 3, 5)):
        ratios = [row[index] / row[base] for row in rows]
        print(f"{label}: median {statistics.median(ratios):.2f}, max {max(ratios):.2f} over {len(ratios)} entries",
              flush=True)
    print(f"once/export at or below 1.05: {sum(1 for row in rows if row[3] / row[1] <= 1.05)} of {len(rows)}",
          flush=True)
    print(f"entries with blocks stood in: {sum(1 for row in rows if row[4])}", flush=True)
    print("groups traced in full after all, by reason (trace_once_fallbacks):", flush=True)
    for why, count in sorted(reasons.items(), key=lambda item: -item[1]):
        print(f"- {count}: {why}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "corpus":
        corpus(int(sys.argv[2]), sys.argv[3].split(",") if len(sys.argv) > 3 else None)
        sys.exit(0)
    if sys.argv[1] == "check":
        check(sys.argv[2].split(","), tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else True)
    else:
        timing(int(sys.argv[2]), [int(n) for n in sys.argv[3].split(",")])
