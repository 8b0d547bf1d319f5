"""How long the refusal of a hostile file takes (issue 50): the tests prove that nothing ran (kernels counted, bytes
read counted, work linear in the file); this prints the wall time of each refusal, which they no longer assert.

``python -m benchmarks.refusals`` prints, per case, the median of ``--rounds`` timings (the cases interleaved in
each round, so the machine's load falls on all alike):

- **call fan-out**: ``IR.load`` of a 40-deep file whose modules each call their child twice (2**40 leaf calls);
- **kernel made in the graph**: the call of a rebuilt model whose 1024x1024 kernel, convolved with a 2048x2048
  input, is 2.2 TFLOP (refused by the compute budget on fake tensors);
- **matrix product, checked run**: the same with ``max_bytes=None`` (op by op): a 20000x20000 product;
- **20 000 slotless edges**: ``IR.load`` of a graph whose slot assignment was quadratic once (loaded, not refused);
- **6 GiB sparse tensors file**: ``IR.load`` of a document whose tensors file is 6 GiB of zeros.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import ir2torch
import torch2ir
from benchmarks import results_file
from common import IR
from common.errors import IRError
from tests.security.test_call_fanout import _document, fanout
from tests.security.test_compute_budget import _Kernel, _Product
from tests.security.test_known_attacks import _wide


def _cases(folder: Path) -> dict[str, Callable[[], object]]:
    """Case name -> a call that refuses (raises an ``IRError``) or loads."""
    fan = folder / "fanout.ir.json"
    fan.write_text(json.dumps(_document(fanout(40))))
    x = torch.randn(1, 1, 2048, 2048)
    kernel = ir2torch.convert(IR.load(torch2ir.convert(_Kernel(), (x,)).save(folder / "k.ir.json")),
                              _Kernel().state_dict())
    small = torch.randn(1, 4)
    product = ir2torch.convert(IR.load(torch2ir.convert(_Product(), (small,)).save(folder / "p.ir.json")),
                               max_bytes=None)
    wide = _wide(20_000, folder / "wide.ir.json")
    sparse = torch2ir.convert(_Buffers(), (torch.ones(2, 4),)).save(folder / "s.ir.json")
    sidecar = sparse.with_name(json.loads(sparse.read_text(encoding="utf-8"))["tensors"]["file"])
    with open(sidecar, "wb") as fh:
        fh.truncate(6 * 2**30)
    return {"call fan-out (IR.load)": lambda: IR.load(fan), "kernel made in the graph (call)": lambda: kernel(x),
            "matrix product, checked run (call)": lambda: product(small),
            "20 000 slotless edges (IR.load, loads)": lambda: IR.load(wide),
            "6 GiB sparse tensors file (IR.load)": lambda: IR.load(sparse)}


class _Buffers(torch.nn.Module):
    """Holds a non-persistent buffer, so its IR has a tensors file."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.arange(4.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _timed(call: Callable[[], object]) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        call()
        outcome = "loaded"
    except IRError as exc:
        outcome = type(exc).__name__
    return time.perf_counter() - start, outcome


def main(argv: list[str] | None = None) -> None:
    """Time each case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-refusals.md"),
                        help=results_file.output_help("results-refusals.md"))
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cases = _cases(Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in cases}
        outcomes: dict[str, str] = {}
        for _ in range(options.rounds):
            for name, call in cases.items():
                seconds, outcomes[name] = _timed(call)
                times[name].append(seconds)
    lines = [f"1 thread, median of {options.rounds} interleaved rounds.", "",
             "| case | outcome | median ms | min ms | max ms |", "|---|---|---|---|---|"]
    for name, values in times.items():
        lines.append(f"| {name} | {outcomes[name]} | {statistics.median(values) * 1e3:.1f} | "
                     f"{min(values) * 1e3:.1f} | {max(values) * 1e3:.1f} |")
    results_file.write(options.output, "How long refusing a hostile file takes (issue 50)",
                       sys.argv[1:] if argv is None else argv, load, "\n".join(lines))

if __name__ == "__main__":
    main()
