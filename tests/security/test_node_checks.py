"""Data preconditions are checked by the nodes that need them (:mod:`ir2torch.run_safety.node_checks`), not by a
dispatch mode over the whole call: a typed embedding leaf's indices are still refused before the kernel runs (with
a memory budget and without), and a call whose nodes read no data runs no op through a dispatch mode (a plain
``nn.Embedding`` leaf has its one operator's precondition tested directly)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRError
from common.surface import default_surface
from ir2torch.run_safety import checked, node_checks, op_modes
from ir2torch.run_safety.node_checks import PRECONDITION_FREE_COMPOSITES, checked_target, is_composite
from ir2torch.run_safety.op_preconditions import PRECONDITIONS
from ir2torch.run_safety.writes import writes_in_place


class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.proj = nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids)).relu()


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.norm(self.proj(x)) * 2, -1)


def _overload(name: str) -> Any:
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def test_the_reviewed_composites_are_composites_of_the_surface_without_preconditions() -> None:
    surface = default_surface()
    for name in sorted(PRECONDITION_FREE_COMPOSITES):
        assert name in surface, name
        assert name not in PRECONDITIONS, name
        assert is_composite(_overload(name)), name


def test_every_surface_overload_with_a_precondition_or_a_composite_is_checked() -> None:
    """A default overload with a precondition, a composite not reviewed as reaching none, or one writing in place
    (its target tested against the caller's tensors without a forward budget) never runs bare."""
    for name in sorted(default_surface()):
        overload = _overload(name)
        if name in PRECONDITIONS or (is_composite(overload) and name not in PRECONDITION_FREE_COMPOSITES) or \
                writes_in_place(overload):
            assert checked_target(overload) is not overload, name
        else:
            assert checked_target(overload) is overload, name


@pytest.mark.parametrize("budget", ["available", None])
def test_a_typed_embeddings_indices_are_refused_before_the_kernel_runs(budget: str | None) -> None:
    model = _Embed().eval()
    ids = torch.tensor([[0, 6, 2]])
    rebuilt = ir2torch.convert(torch2ir.convert(model, (ids,)), model.state_dict(), max_bytes=budget,
                               max_flops=None if budget is None else "auto")
    torch.testing.assert_close(rebuilt(ids), model(ids))
    for hostile in (torch.tensor([[0, 7, 2]]), torch.tensor([[-1, 0, 0]]), torch.tensor([[0, 10**12, 0]])):
        with pytest.raises(IRError, match="refused before it runs"):
            rebuilt(hostile)


def _dispatched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    original = op_modes.DataChecks.__torch_dispatch__

    def counting(self: Any, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        seen.append(str(func))
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(op_modes.DataChecks, "__torch_dispatch__", counting)
    return seen


def test_only_the_nodes_reading_data_run_under_the_data_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _dispatched(monkeypatch)
    embed, plain = _Embed().eval(), _Plain().eval()
    ids, x = torch.tensor([[0, 6, 2]]), torch.randn(2, 4)
    rebuilt_embed = ir2torch.convert(torch2ir.convert(embed, (ids,)), embed.state_dict())
    rebuilt_plain = ir2torch.convert(torch2ir.convert(plain, (x,)), plain.state_dict())
    for _ in range(2):  # the first call is probed, the second runs as every later one
        rebuilt_plain(x)
    assert seen == []
    rebuilt_embed(ids)
    seen.clear()
    rebuilt_embed(ids)
    assert seen == []  # a plain nn.Embedding leaf has its one operator's precondition tested directly


def test_an_embedding_leaf_that_could_dispatch_more_runs_under_the_data_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _dispatched(monkeypatch)
    embed = _Embed().eval()
    ids = torch.tensor([[0, 6, 2]])
    rebuilt = ir2torch.convert(torch2ir.convert(embed, (ids,)), embed.state_dict())
    rebuilt(ids)
    leaf = rebuilt.embed
    handle = leaf.register_forward_hook(lambda module, args, out: out * 1)  # a hook may run any operator
    seen.clear()
    torch.testing.assert_close(rebuilt(ids), embed.proj(embed.embed(ids) * 1).relu())
    assert seen == ["aten.embedding.default", "aten.mul.Tensor"]  # the leaf's call, its hook included
    handle.remove()
    leaf.max_norm = 1.0  # the renormalisation reads the indices too
    seen.clear()
    rebuilt(ids)
    assert "aten.embedding_renorm_.default" in seen and "aten.embedding.default" in seen
    for hostile in (torch.tensor([[0, 7, 2]]), torch.tensor([[-1, 0, 0]])):
        with pytest.raises(IRError, match="refused before it runs"):
            rebuilt(hostile)


class _Detaching(nn.Module):
    """In place on its own values (as Gemma-2's rebuilt decoder is: ``detach_``)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).detach_()
        return y.add_(1).relu_()


def test_a_class_first_seen_under_symbolic_trace_is_still_read_as_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a class needs the data checks is read once per process (``MODULE_CHECKS``); read first while
    ``torch.fx.symbolic_trace`` patched ``nn.Module.__call__`` (a test tracing a rebuild did, in a CI worker's order),
    ``nn.Linear`` was cached as needing them and every later plain leaf ran under ``DataChecks``."""
    cache = dict(node_checks.MODULE_CHECKS)
    node_checks.MODULE_CHECKS.clear()
    try:
        plain, x = _Plain().eval(), torch.randn(2, 4)
        rebuilt = ir2torch.convert(torch2ir.convert(plain, (x,)), plain.state_dict())
        traced = torch.fx.symbolic_trace(rebuilt)
        assert torch.equal(traced(x), plain(x))
        assert node_checks.module_needs_checks(nn.Linear) is False
        assert node_checks.module_needs_checks(nn.LayerNorm) is False
        assert node_checks.module_needs_checks(nn.Embedding) is True
        seen = _dispatched(monkeypatch)
        for _ in range(2):
            assert torch.equal(rebuilt(x), plain(x))
        assert seen == []
    finally:
        node_checks.MODULE_CHECKS.clear()
        node_checks.MODULE_CHECKS.update(cache)


def test_a_class_defining_its_own_call_needs_the_checks() -> None:
    class Called(nn.Linear):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return super().__call__(*args, **kwargs)

    Called.__module__ = nn.Linear.__module__  # inside torch.nn.modules, yet its own __call__ may dispatch anything
    assert node_checks.module_needs_checks(Called) is True
    assert node_checks.module_needs_checks(nn.Linear) is False


def test_without_budgets_in_place_nodes_are_checked_by_themselves_not_op_by_op(monkeypatch) -> None:
    """``max_bytes=None, max_flops=None``: a graph writing in place runs without a dispatch mode (no checked run,
    no data checks); its writes into its own values run, one into the caller's tensor is still refused."""
    seen: list[str] = []
    original = checked.Checked.__torch_dispatch__

    def counting(self: Any, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        seen.append(str(func))
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(checked.Checked, "__torch_dispatch__", counting)
    data = _dispatched(monkeypatch)
    model, x = _Detaching().eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict(), max_bytes=None, max_flops=None)
    with torch.no_grad():
        for _ in range(2):
            assert torch.equal(rebuilt(x), model(x))
    assert seen == [] and data == []
    with torch.no_grad():  # the caller's tensor as the target: still refused before the write
        rebuilt.proj = nn.Identity()
        before = x.clone()
        with pytest.raises(IRError, match="shares memory with an input of the call"):
            rebuilt(x)
    assert torch.equal(x, before)
