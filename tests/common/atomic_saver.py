"""IR contents with a tensors file, and a helper process that forks savers for tests/common/test_atomic_files.py.

Run as ``python -c "import sys; from tests.common.atomic_saver import main; main(sys.argv[1:])" FOLDER LAYERS``
(not ``-m``, which would make the classes ``__main__.Stack`` and so the IRs different): it imports
torch once, converts the two contents, saves in FOLDER (so the savers find every lazy import
done), prints ``ready SECONDS`` (how long one save takes) and then reads commands on stdin, one per line:

- ``save PATH START STEP``: fork a saver that saves ``contents[START % 2]``, ``contents[(START + STEP) % 2]``,
  ... to PATH in an endless loop (until it is killed); prints the saver's pid;
- ``reap PID``: wait for that saver to end; prints its wait status.

Forking from one process that has already imported torch makes a saver start in milliseconds, so a
test can kill dozens of them at random points within its time budget.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch
from torch import nn

import torch2ir
from common import IR


class Layer(nn.Module):
    """``relu(x * scale)`` or ``tanh(x * scale)``; ``scale`` is a non-persistent buffer (it goes to ir.tensors)."""

    def __init__(self, index: int, variant: int) -> None:
        super().__init__()
        self.variant = variant
        self.register_buffer("scale", torch.full((4,), float(index + 1 + 100 * variant)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.scale) if self.variant == 0 else torch.tanh(x * self.scale)


class Stack(nn.Module):
    """``layers`` Layers in a row."""

    def __init__(self, layers: int, variant: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer(i, variant) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def contents(layers: int = 32) -> tuple[IR, IR]:
    """Two IRs that differ in graph (relu / tanh) and in every tensor, so a mixed pair equals neither."""
    return tuple(torch2ir.convert(Stack(layers, variant), (torch.ones(2, 4),)) for variant in (0, 1))  # type: ignore[return-value]


def _saver(irs: tuple[IR, IR], path: str, start: int, step: int) -> None:
    try:
        i = start
        while True:
            irs[i % 2].save(path)
            i += step
    finally:
        traceback.print_exc()  # the loop ends only on an exception (a kill ends the process before this)
        os._exit(3)  # a saver only ends by being killed; anything else is a failure the test sees


def main(argv: list[str]) -> None:
    """Serve ``save`` / ``reap`` commands on stdin (see the module docstring)."""
    folder, layers = Path(argv[0]), int(argv[1])
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process that has threads
    irs = contents(layers)
    warm = folder / "warm-up"
    warm.mkdir()
    irs[0].save(warm / "m.ir.json")
    start = time.perf_counter()
    for i in range(4):
        irs[i % 2].save(warm / "m.ir.json")
    shutil.rmtree(warm)
    gc.freeze()  # a saver's garbage collections do not copy the shared heap
    print(f"ready {(time.perf_counter() - start) / 4:.6f}", flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "save":
            pid = os.fork()
            if pid == 0:
                _saver(irs, args[0], int(args[1]), int(args[2]))
            print(pid, flush=True)
        elif command == "reap":
            print(os.waitpid(int(args[0]), 0)[1], flush=True)

