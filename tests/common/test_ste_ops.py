"""The straight-through estimators of :mod:`common.ste_ops` (``torch2ir_ste``): each computes what brevitas'
Function of the same name computes, bit for bit, with its gradient; torch's own operator checks pass; every
allow-list accepts them by name without importing anything, and a rebuild of a file naming them imports no
brevitas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.library import opcheck

from common.known_ops import STE_OPERATORS
from common.safety import DEFAULT_ALLOWLIST, op_class
from common.ste_ops import OPS
from torch2ir.frontend.ste_functions import FUNCTIONS, _probe_args, agrees, operator_for

ROOT = Path(__file__).resolve().parents[2]


def test_every_operator_is_known_and_pure() -> None:
    assert tuple(OPS) == STE_OPERATORS
    for name in OPS:
        assert DEFAULT_ALLOWLIST.is_allowed(f"torch2ir_ste.{name}.default")
        assert op_class(f"torch2ir_ste.{name}.default")[0] == "pure"
    assert not DEFAULT_ALLOWLIST.is_allowed("torch2ir_ste.no_such_op.default")


@pytest.mark.parametrize("name", sorted(OPS))
def test_torch_opcheck(name: str) -> None:
    for args in _probe_args(name):
        finite = (args[0][torch.isfinite(args[0])], *args[1:])  # opcheck compares with NaN unequal
        opcheck(OPS[name], finite)


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_brevitas_function_agrees_with_its_operator(function: str) -> None:
    autograd_ste_ops = pytest.importorskip("brevitas.ops.autograd_ste_ops")
    cls = getattr(autograd_ste_ops, function.rpartition(".")[2])
    assert agrees(cls, FUNCTIONS[function])
    assert operator_for(cls) is OPS[FUNCTIONS[function]]


def test_a_function_computing_otherwise_is_not_mapped() -> None:
    class RoundSteFn(torch.autograd.Function):  # rounds half away from zero: not torch.round's ties to even
        @staticmethod
        def forward(ctx, x):
            return torch.sign(x) * torch.floor(x.abs() + 0.5)

        @staticmethod
        def backward(ctx, g):
            return g

    RoundSteFn.__module__ = "brevitas.ops.autograd_ste_ops"
    assert not agrees(RoundSteFn, "round") and operator_for(RoundSteFn) is None

    class Zero(torch.autograd.Function):  # the same forward, another backward
        @staticmethod
        def forward(ctx, x):
            return torch.round(x)

        @staticmethod
        def backward(ctx, g):
            return g * 0

    assert not agrees(Zero, "round")


def test_the_straight_through_gradient() -> None:
    x = torch.tensor([-1.6, 0.4, 2.5], requires_grad=True)
    torch.ops.torch2ir_ste.round(x).sum().backward()
    assert torch.equal(x.grad, torch.ones(3))  # round's own gradient is zero
    y = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    torch.ops.torch2ir_ste.abs_binary_sign_grad(y).sum().backward()
    assert torch.equal(y.grad, torch.tensor([-1.0, 1.0, 1.0]))  # abs' gradient at 0 is 0


def test_a_rebuild_registers_them_without_brevitas(tmp_path: Path) -> None:
    """A saved IR naming ``torch2ir_ste`` operators loads and runs in a fresh process, the gradient straight
    through, importing no brevitas."""
    import torch2ir

    class Quant(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.torch2ir_ste.round(x * 4) / 4

    path = tmp_path / "m.ir.json"
    torch2ir.convert(Quant(), (torch.randn(3),)).save(str(path))
    code = (f"import sys, torch, ir2torch\nfrom common.ir import IR\n"
            f"m = ir2torch.convert(IR.load({str(path)!r}), {{}})\n"
            "x = torch.tensor([0.1, 0.2, 0.9], requires_grad=True)\ny = m(x)\n"
            "assert torch.equal(y, torch.tensor([0.0, 0.25, 1.0])), y\ny.sum().backward()\n"
            "assert torch.equal(x.grad, torch.ones(3)), x.grad\n"
            "assert not any(n == 'brevitas' or n.startswith('brevitas.') for n in sys.modules)\nprint('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=300)
    assert proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]
