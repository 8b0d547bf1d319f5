"""A rebuilt graph's runtime assertions on sizes and values read from data, checked again while ``torch.export``
traces the rebuild (:mod:`common.deferred_checks`), give back the same IR.

- Sizes related by the ops themselves: broadcasting two sizes read from data learns ``Eq(u0, u1)``, and broadcasting
  against a fixed size then ``Eq(u0, 4)``. The rebuilt graph asserts both again where its forward ends; by then
  export has replaced ``u0`` by 4, so ``Eq(u0, u1)`` came to it as ``Eq(4, u1)``, narrowing ``u1`` to one value
  and placing other assertions. What export already holds (as recorded, or with the sizes since replaced) is not
  given to it again.
- A boolean read from data checked with ``torch._check``: export writes its symbol ``u0`` as ``sym_ite(b, 1, 0)``;
  the rebuild computed that as ``Piecewise((1, Eq(u0, 1)), (0, True))``, and export asserted the piecewise
  expressions. It is checked as ``u0`` (equal for every value ``u0`` can take, 0 or 1), and ``Eq(u0, 1)`` before
  the bounds ``u0 >= 1``, ``u0 <= 1`` export derived from it (checked first, they made ``u0`` 1 at once and the
  equality was never recorded).
- transformers' Cohere-Compass vision tower (its merged patch counts broadcast against each other and against
  the opaque leaf's outputs), EXAONE-4.5 (a ``torch._check`` of ``(ids == ...).all()``), HunyuanVL's vision
  tower (its patch merger's ``torch._check`` of the grid read from data) and Mimi (its SEANet convolutions' padding
  read from data; both: ``tests/loop/test_sizes_from_data.py``), with ``opaque="auto"``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir


class Broadcasts(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        n = a.nonzero().float().sum(1)  # u0 rows
        m = b.nonzero().float().sum(1)  # u1 rows
        return (n + m) + torch.ones(4)  # Eq(u0, u1), then Eq(u0, 4)


class CheckedBool(nn.Module):
    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        torch._check((ids >= 0).all().item())
        return x[ids]


def _asserted(ir) -> list[str]:
    return [ir.root.node(n)["args"][1] for n in ir.root.nodes
            if ir.root.node(n).get("implementation") == "aten._assert_scalar.default"]


def test_sizes_the_ops_relate_are_not_asserted_again_once_replaced() -> None:
    model = Broadcasts().eval()
    args = (torch.tensor([1, 0, 2, 3, 4]), torch.tensor([0, 1, 1, 1, 1]))
    ir = torch2ir.convert(model, args)
    assert any("Eq(u0, u1)" in text for text in _asserted(ir))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(*args), model(*args))
    with pytest.raises(RuntimeError):  # three rows where the graph holds four: the rebuild's assertion raises
        rebuilt(torch.tensor([1, 0, 2, 0, 4]), torch.tensor([0, 1, 1, 0, 1]))
    assert torch2ir.convert(rebuilt, args) == ir


def test_a_checked_boolean_read_from_data_is_asserted_as_its_symbol() -> None:
    model = CheckedBool().eval()
    args = (torch.randn(5, 3), torch.tensor([0, 2, 4]))
    ir = torch2ir.convert(model, args)
    assert any("Eq(u0, 1)" in text for text in _asserted(ir))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(*args), model(*args))
    with pytest.raises(RuntimeError):  # a negative index: the check holds in the rebuild as in the model
        rebuilt(args[0], torch.tensor([0, -1, 4]))
    again = torch2ir.convert(rebuilt, args)
    assert not any("Piecewise" in text for text in _asserted(again))
    assert again == ir


@pytest.mark.parametrize("name", ["cohere_compass_vision", "exaone4_5", "hunyuan_vl_vision", "mimi"])
def test_real_models_close_the_loop_with_opaque_auto(name: str) -> None:
    from benchmarks.sweep_registries import build
    from common.opaque import named_classes

    torch.manual_seed(0)
    model, args, kwargs = build("transformers", name, 64)
    model.eval()
    ir = torch2ir.convert(model, args, kwargs, opaque="auto")
    allow = sorted({cls for _, cls, _ in ir.capture.opaque} | set(named_classes(ir.values())))
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    with torch.no_grad():
        expected, got = pytree.tree_leaves(model(*args, **kwargs)), pytree.tree_leaves(rebuilt(*args, **kwargs))
    assert len(expected) == len(got)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True) if isinstance(a, torch.Tensor))
    assert torch2ir.convert(rebuilt, args, kwargs, opaque="auto") == ir
