"""Operators that read counts and labels from tensor data have them checked before the kernel runs (issue 50):
``repeat_interleave`` with repeats whose int64 sum wraps (the kernel wrote 2**63 - 1 elements) or an
``output_size`` that is not their sum, ``ctc_loss`` with labels beyond the classes (10**9 segfaulted). Each case
runs in a child process, where a crash is a failure; only an IRError may come out, with or without a budget."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common import IR

ROOT = Path(__file__).resolve().parents[2]


class Repeat(nn.Module):
    def forward(self, repeats: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(repeats)


class RepeatSized(nn.Module):
    def forward(self, repeats: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(repeats, output_size=6)


class CTC(nn.Module):
    def forward(self, log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.ctc_loss(log_probs, targets, input_lengths=[10, 10], target_lengths=[3, 3])


def _ctc_ir(example: tuple) -> IR:
    """An IR calling ``aten.ctc_loss.IntList`` as a file may (export cannot trace ctc_loss: its output size is
    data-dependent to the fake kernel): a model calling another op on both inputs, that node renamed."""

    class Two(nn.Module):
        def forward(self, log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.isin.Tensor_Tensor(log_probs, targets.float())

    doc = torch2ir.convert(Two(), example, allow=["aten::isin"]).to_dict()
    node = doc["root"]["nodes"]["isin"]
    node["args"][1] = type(node["args"][1])(node="targets", index=None)  # the input itself, not its float copy
    edges = doc["root"]["edges"]
    edges.pop(next(k for k in edges if k[1] == "isin" and k[0] != "log_probs"))
    edges[("targets", "isin")] = {"src": "targets", "dst": "isin", "slot": 1}
    node["implementation"] = "aten.ctc_loss.IntList"
    node["args"] = [*node["args"], [10, 10], [3, 3]]
    node["meta"] = {"shape": [], "dtype": torch.float32}
    return IR.from_dict(doc)


def _cases() -> dict[str, tuple[nn.Module, tuple, list[tuple]]]:
    log_probs = torch.randn(10, 2, 5).log_softmax(-1)
    targets = torch.tensor([[1, 2, 3], [4, 1, 2]])
    return {
        "repeat": (Repeat(), (torch.tensor([1, 2, 3]),),
                   [(torch.tensor([2**63 - 1, 2**63 - 1, 7]),),  # the int64 sum wraps to 5: a segfault before
                    (torch.tensor([2**62] * 3),), (torch.tensor([2**62, 2**62, -2**63 + 5]),),
                    (torch.tensor([-1, 2, 3]),)]),
        "repeat_sized": (RepeatSized(), (torch.tensor([1, 2, 3]),),
                         [(torch.tensor([1000, 2, 3]),), (torch.tensor([0, 0, 1]),)]),
        "ctc": (CTC(), (log_probs, targets),
                [(log_probs, torch.tensor([[1, 2, 10**9], [4, 1, 2]])),  # a label of 10**9: a segfault before
                 (log_probs, torch.tensor([[1, 2, 5], [4, 1, 2]])),
                 (log_probs, torch.tensor([[1, -7, 3], [4, 1, 2]]))]),
    }


@pytest.mark.parametrize("name", ["repeat", "repeat_sized", "ctc"])
@pytest.mark.parametrize("budget", ["available", None])
def test_hostile_data_is_refused_before_the_kernel_runs(name: str, budget, tmp_path: Path) -> None:
    model, example, hostile = _cases()[name]
    ir = _ctc_ir(example) if name == "ctc" else torch2ir.convert(model, example)
    allow = ["aten::ctc_loss"] if name == "ctc" else []  # outside the default surface
    rebuilt = ir2torch.get_default_converter().convert(ir, max_bytes=budget, allow=allow)
    expected = model(*example)
    assert torch.equal(rebuilt(*example), expected)  # honest data runs
    ir.save(tmp_path / "m.ir.json")
    torch.save(hostile, tmp_path / "hostile.pt")
    script = textwrap.dedent(f"""
        import torch, ir2torch
        from common import IR
        from common.errors import IRError
        model = ir2torch.get_default_converter().convert(IR.load({str(tmp_path / "m.ir.json")!r}, allow={allow!r}),
                                                         max_bytes={budget!r}, allow={allow!r})
        for args in torch.load({str(tmp_path / "hostile.pt")!r}, weights_only=True):
            try:
                model(*args)
                print("ran")
            except IRError as exc:
                print("refused", exc.message.replace(chr(10), " ")[:200])
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]  # a signal (segfault) is a failure
    lines = done.stdout.splitlines()
    assert len(lines) == len(hostile) and all(line.startswith("refused") for line in lines), lines
