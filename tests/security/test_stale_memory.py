"""Uninitialized allocations a file names (``aten.empty`` and its kin) are zero-filled when they run: a model is
never handed memory the process freed (issue 50: ``aten.empty`` once returned 4088 of 4096 values of a tensor
just freed). On fake and meta tensors the plain operator runs, so a rebuild converts back to the same IR."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from ir2torch.run_safety.uninitialized import UNINITIALIZED


class Uninitialized(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.empty(4096), torch.empty_like(x), x.new_empty((64, 64)),
                torch.empty_strided((64, 64), (1, 64)), x + 1)


def _freed() -> None:
    """Fill and free tensors of the sizes the model allocates next (their memory goes back to the allocator)."""
    for size in (4096, 4096, 8 * 16):
        t = torch.full((size,), 7.0)
        del t


@pytest.mark.parametrize("level", ["ir", "flat"])
def test_uninitialized_allocations_are_zero_filled(level: str, tmp_path) -> None:
    x = torch.randn(8, 16)
    ir = torch2ir.convert(Uninitialized(), (x,))
    names = {a.get("implementation") for _, a in ir["root"].graph.nodes(data=True)}
    assert {"aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty.default",
            "aten.empty_strided.default"} <= names and names & UNINITIALIZED
    path = tmp_path / "m.json"
    (ir if level == "ir" else ir.lower()).save(path)
    rebuilt = ir2torch.convert(path)
    for _ in range(3):
        _freed()
        *allocated, added = rebuilt(x)
        assert all(t.numel() and not t.any() for t in allocated)
        assert torch.equal(added, x + 1)


def test_the_zero_fill_leaves_the_loop_closed_and_compiles() -> None:
    x = torch.randn(8, 16)
    ir = torch2ir.convert(Uninitialized(), (x,))
    rebuilt = ir2torch.convert(IR.from_dict(ir.to_dict()))
    assert torch2ir.convert(rebuilt, (x,)) == ir  # export traces the plain operators
    compiled = torch.compile(rebuilt, fullgraph=True, backend="eager")
    *allocated, added = compiled(x)
    assert all(not t.any() for t in allocated) and torch.equal(added, x + 1)
    # on meta, what derives from the input stays on meta (nothing to fill); a factory op runs on the device it
    # records (the CPU), and is filled there
    out = ir2torch.convert(ir, device="meta")(x.to("meta"))
    assert [t.device.type for t in out] == ["cpu", "meta", "meta", "cpu", "meta"]
    assert not out[0].any() and not out[3].any()


def test_a_model_writing_its_empty_tensor_computes_what_it_did() -> None:
    """transformers' MoE experts invert a permutation into ``torch.empty_like``: the fill changes nothing."""

    class Inverse(nn.Module):
        def forward(self, perm: torch.Tensor) -> torch.Tensor:
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.size(0))
            return inv

    perm = torch.randperm(100)
    rebuilt = ir2torch.convert(torch2ir.convert(Inverse(), (perm,)))
    assert torch.equal(rebuilt(perm), Inverse()(perm))
