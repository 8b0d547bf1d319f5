"""The node checks of a folded forward (:func:`ir2torch.run_safety.node_checks.untraced`, issue 52): a precondition's,
proven indices' and write check is made at every call without first testing whether a tracer runs the call (the
folded forward runs only where none does), refuses what the checked node refuses, gives its result otherwise, and a
copy into a graph that no longer proves an index drops the proof as the plain form does."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
from torch import fx

from ir2torch.codegen import fast_paths
from ir2torch.run_safety import node_checks, writes
from ir2torch.run_safety.node_checks import CheckedCall, checked_target, untraced, with_call
from ir2torch.run_safety.op_modes import storages

aten = torch.ops.aten
x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))


def _proven_index() -> CheckedCall:
    return node_checks._named(CheckedCall(node_checks._run_index_proven, "aten.index.Tensor", ((0, 0, 1),),
                                          aten.index.Tensor, "aten.index.Tensor"), aten.index.Tensor, aten.index.Tensor)


def _targets() -> list[Any]:
    """A plain precondition's check, proven indices' check, and a write check (of an in-place overload)."""
    written = checked_target(aten.index_put_.default)
    assert written.func is node_checks._run_write_checked
    return [checked_target(aten.index.Tensor), _proven_index(), written]


def test_untraced_forms_check_at_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    bad, good = torch.tensor([0, 1, 2]), torch.tensor([1, 0])  # 3 indices > 2 rows: the shapes do not settle it
    for target in _targets():
        fast = untraced(target)
        assert fast == target.overload and fast.func is node_checks._UNTRACED[target.func]
        if target.func is node_checks._run_write_checked:
            assert fast.args[1].func is node_checks._run_precondition_untraced  # the inner precondition too
            args = (torch.zeros(2), [bad], torch.ones(3))
            honest = (torch.zeros(2), [torch.tensor([1])], torch.ones(1))
        else:
            args, honest = (x, [bad]), (x, [good])
        for call in (target, fast):
            with pytest.raises(RuntimeError, match="refused before it runs"):
                call(*args)
        a, b = target(*(a.clone() if isinstance(a, torch.Tensor) else a for a in honest)), \
            fast(*(a.clone() if isinstance(a, torch.Tensor) else a for a in honest))
        assert torch.equal(a, b)
        with monkeypatch.context() as patch:  # as under a tracer: the plain form leaves the check to it
            patch.setattr(node_checks, "tracing", lambda: True)
            with pytest.raises(RuntimeError, match="refused before it runs"):
                fast(*args)  # the untraced form never asks
    assert untraced(aten.index.Tensor) is aten.index.Tensor  # anything else: as it is
    data_checked = node_checks._named(CheckedCall(node_checks._run_data_checked, aten.index.Tensor),
                                      aten.index.Tensor, aten.index.Tensor)
    assert untraced(data_checked) is data_checked


def test_untraced_write_check_refuses_a_callers_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing a tensor of the caller's is refused by the folded forward's write check as by the plain one (also
    where the plain one would leave it to a tracer), and a tensor of its own is written as by the overload."""
    target = checked_target(aten.add_.Tensor)
    fast = untraced(target)
    assert fast.func is node_checks._run_write_checked_untraced
    caller, own = torch.zeros(3), torch.zeros(3)
    monkeypatch.setattr(writes.CALLER, "inputs", storages(([caller], {})))
    for call in (target, fast):
        with pytest.raises(Exception, match="(?i)writ"):
            call(caller, torch.ones(3))
    assert torch.equal(fast(own, torch.ones(3)), torch.ones(3)) and torch.equal(caller, torch.zeros(3))
    monkeypatch.setattr(node_checks, "tracing", lambda: True)
    with pytest.raises(Exception, match="(?i)writ"):
        fast(caller, torch.ones(3))


def test_rewrite_makes_the_folded_forwards_checks_untraced_and_with_call_keeps_the_form() -> None:
    graph = fx.Graph()
    a, i = graph.placeholder("a"), graph.placeholder("i")
    node = graph.call_function(_proven_index(), (a, [i]))
    other = graph.call_function(checked_target(aten.gather.default), (a, 0, i))
    graph.output((node, other))
    fast_paths.rewrite(graph)
    assert node.target.func is node_checks._run_index_proven_untraced
    assert fast_paths.tensor_index in node.target.args  # the fast entry, after the check
    assert other.target.func is node_checks._run_precondition_untraced
    fast = with_call(untraced(checked_target(aten.index.Tensor)), fast_paths.tensor_index)
    assert fast.func is node_checks._run_precondition_untraced


def test_a_copy_that_does_not_prove_the_index_drops_the_proof_in_its_form() -> None:
    graph = fx.Graph()
    x_, y = graph.placeholder("x"), graph.placeholder("y")
    s = graph.call_function(operator.getitem, (graph.call_function(aten.sort.default, (y,)), 1))
    index = graph.call_function(aten.index.Tensor, (x_, [s]))
    graph.output(index)
    proven = untraced(checked_target(index.target, index))
    assert proven.func is node_checks._run_index_proven_untraced and proven.args[1] == ((0, -1, 1),)
    assert checked_target(proven, index) is proven  # the same graph: kept
    index.args = (index.args[0], [graph.placeholder("planted")])
    plain = checked_target(proven, index)
    assert plain.func is node_checks._run_precondition_untraced and plain.overload is aten.index.Tensor
