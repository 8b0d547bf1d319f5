"""What storing alike instances once (shared bodies, format 2) changes, on Llama-3-70B dimensions (meta).

Usage::

    python benchmarks/shared_bodies.py                   # 2, 8, 32 and 80 layers
    python benchmarks/shared_bodies.py --layers 2 8 --runs 3

For each depth: one ``torch.export.export`` and one ``torch2ir.convert`` of the same model, interleaved, and
their ratio (alike layers traced once, the default); the file as saved (format 2) and as format 1 would write it
(every instance in full); ``IR.load`` of each (median of ``--runs``); ``ir2torch.convert(..., device="meta")`` of
each loaded IR. Times are medians; nothing is asserted. Everything runs in this process, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import results_file


def _median_time(fn: Any, runs: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure(layers: int, runs: int, folder: str) -> dict[str, Any]:
    """The row of one depth (see the module docstring)."""
    import torch

    import ir2torch
    import torch2ir
    from benchmarks.models import llama_70b
    from common.ir import IR
    from common.json_files import dumps
    from common.values import encode

    model = llama_70b(layers=layers)
    args = (torch.zeros(1, 16, dtype=torch.long, device="meta"),)
    export_s, convert_s = [], []
    ir = None
    for _ in range(runs):  # interleaved: export, then convert, each run
        t0 = time.perf_counter()
        torch.export.export(model, args, strict=False)
        export_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ir = torch2ir.convert(model, args)
        convert_s.append(time.perf_counter() - t0)
    assert ir is not None
    shared = ir.save(Path(folder) / f"llama{layers}.ir.json")
    full = Path(folder) / f"llama{layers}.v1.ir.json"
    full.write_text(dumps({"format": "torch2ir.ir", "format_version": 1,
                           "implementations": ir.to_dict(value_fn=encode, edge_list=True)}), encoding="utf-8")
    row: dict[str, Any] = {"layers": layers, "export_s": statistics.median(export_s),
                           "convert_s": statistics.median(convert_s)}
    for label, path in (("v2", shared), ("v1", full)):
        row[f"{label}_mb"] = os.path.getsize(path) / 1e6
        row[f"{label}_load_s"], _ = _median_time(lambda path=path: IR.load(path), runs)
        row[f"{label}_rebuild_s"], _ = _median_time(lambda path=path: ir2torch.convert(IR.load(path), device="meta"),
                                                    runs)
        row[f"{label}_rebuild_s"] -= row[f"{label}_load_s"]
    row["bodies"] = len(json.loads(shared.read_text(encoding="utf-8")).get("bodies", {}))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| layers | export (s) | convert (s) | convert / export | bodies | file, format 1 (MB) "
            "| file, shared (MB) | IR.load, format 1 (s) | IR.load, shared (s) | rebuild on meta, format 1 (s) "
            "| rebuild on meta, shared (s) |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        cells = [str(r["layers"]), f"{r['export_s']:.2f}", f"{r['convert_s']:.2f}",
                 f"{r['convert_s'] / r['export_s']:.2f}x", str(r["bodies"]), f"{r['v1_mb']:.2f}", f"{r['v2_mb']:.3f}",
                 f"{r['v1_load_s']:.3f}", f"{r['v2_load_s']:.3f}", f"{r['v1_rebuild_s']:.3f}",
                 f"{r['v2_rebuild_s']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32, 80])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-shared-bodies.md"),
                        help=results_file.output_help("results-shared-bodies.md"))
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    import transformers.modeling_outputs  # noqa: F401  (the output class the IR's out_spec names)

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for layers in args.layers:
            rows.append(measure(layers, args.runs, folder))
            print(f"{layers} layers: done", file=sys.stderr, flush=True)
    results_file.write(args.output, "Shared bodies: Llama-3-70B dimensions at several depths (issue 32)",
                       sys.argv[1:] if argv is None else argv, load, table(rows))


if __name__ == "__main__":
    main()
