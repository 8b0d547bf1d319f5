"""benchmarks/module_times.py: per-module forward times, written as an overlay the view reads."""

from __future__ import annotations

import json
import time

import torch
from torch import nn

from benchmarks.module_times import main, module_times
from common import IR
from common.htmlview.data import view_data
from common.htmlview.overlay import read_overlay


class Slow(nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x + 1


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fast, self.slow = Slow(0.0), Slow(0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.slow(self.fast(x)) + self.slow(x)  # slow is called twice: its times add up


def test_times_are_inclusive_and_summed_over_calls():
    times = module_times(Pair(), (torch.zeros(2),), runs=3, warmup=0)
    assert set(times) == {"root", "fast", "slow"}
    assert 40 <= times["slow"] < 200 and times["fast"] < 10  # two calls of 20 ms
    assert times["root"] >= times["slow"] + times["fast"]


def test_the_overlay_is_read_by_the_view(tmp_path):
    out = tmp_path / "times.json"
    main(["tests.models.zoo:ConvNet", "--import-path", ".", "-i", "2x3x16x16", "--runs", "2", "--rebuilt",
          "-o", str(out)])
    overlay = read_overlay(out)
    assert overlay["root"] > 0 and all(v >= 0 for v in overlay.values())
    import torch2ir
    from tests.models.zoo import ConvNet

    ir = torch2ir.convert(ConvNet().eval(), (torch.zeros(2, 3, 16, 16),))
    paths = {n["p"] for n in view_data(ir)["nodes"]}
    assert set(overlay) <= paths  # every key names a module of the view
    data = view_data(IR.from_dict(ir.to_dict()), overlay, "forward ms")
    assert data["ov"]["name"] == "forward ms" and json.dumps(data["ov"])
