"""Index bounds proven from the graph (:mod:`ir2torch.run_safety.index_provenance`, issue 52): an ``index`` whose
indices a sort made has their shapes compared instead of their values read, and only where that settles it.

Hostile graphs whose provenance looks like a proven one but is not in range (a ``topk`` over a larger dimension, an
index added to, cast, floor-divided by a negative constant, a constant of the file, the sort's indices written in
place or through a view) keep their check and raise an ``IRError``; a proven index whose shapes do not settle it
has its values read and raises too. The honest ones run without reading their values and give eager's result.
"""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch
from torch import fx, nn
from torch.export import Dim

import ir2torch
import torch2ir
from common.errors import IRError
from ir2torch.run_safety import index_checks, index_provenance, node_checks
from ir2torch.run_safety.index_provenance import bound_of, proven_indices, settled
from ir2torch.run_safety.node_checks import checked_target

aten = torch.ops.aten


class _Fn(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, y: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return self.fn(x, y, k)


def _inverse(x: torch.Tensor, y: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Transformers' experts: the inverse of a sort's permutation, then indexing with it."""
    s = y.reshape(-1).sort().indices
    inverse = torch.empty_like(s).index_put_((s,), torch.arange(s.size(0)))
    return x[s // 2] + x[inverse // 2]


#: name -> (function, honest (x, y, k) to convert, honest (x, y, k) of other sizes): the proven graphs.
PROVEN = {
    "sort_floor_divide": (lambda x, y, k: x[y.sort().indices // 2] * 2,
                          (torch.randn(3), torch.randn(6), torch.tensor(0)),
                          (torch.randn(5), torch.randn(9), torch.tensor(0))),
    "argsort": (lambda x, y, k: x[torch.argsort(y, dim=0)], (torch.randn(5, 2), torch.randn(5), torch.tensor(0)),
                (torch.randn(9, 2), torch.randn(7), torch.tensor(0))),
    "inverse_permutation": (_inverse, (torch.randn(4, 3), torch.randn(8), torch.tensor(0)),
                            (torch.randn(6, 3), torch.randn(11), torch.tensor(0))),
}

#: name -> (function, honest (x, y, k), hostile (x, y, k) with the same shapes): not proven, refused.
HOSTILE = {
    "topk_of_a_larger_dim": (lambda x, y, k: x[y.topk(2).indices],
                             (torch.randn(3), torch.tensor([5.0, 4.0, 0, 0, 0, 0]), torch.tensor(0)),
                             (torch.randn(3), torch.tensor([0.0, 0, 0, 0, 4.0, 5.0]), torch.tensor(0))),
    "added_to": (lambda x, y, k: x[y.sort().indices + k],
                 (torch.randn(4), torch.randn(4), torch.tensor(0)), (torch.randn(4), torch.randn(4), torch.tensor(2))),
    "negative_divisor": (lambda x, y, k: x[y.sort().indices // -1],
                         (torch.randn(4), torch.tensor([0.0, 1, 2, 3]), torch.tensor(0)),
                         (torch.randn(2), torch.tensor([0.0, 1, 2, 3]), torch.tensor(0))),
    "cast": (lambda x, y, k: x[y.sort().indices.to(torch.int32) * k.to(torch.int32)],
             (torch.randn(4), torch.randn(4), torch.tensor(1)), (torch.randn(4), torch.randn(4), torch.tensor(3))),
}


#: A rebuild with its memory and compute budgets (probed on fake tensors first), and one without.
LIMITS = {"budgets": {}, "no_budgets": {"max_bytes": None, "max_flops": None}}


def _convert(fn: Any, args: tuple, limits: str = "budgets") -> nn.Module:
    model = _Fn(fn)
    dims = ({0: Dim("a", max=64)}, {0: Dim("b", max=64)}, None)
    return ir2torch.convert(torch2ir.convert(model, args, dynamic_shapes=dims), model.state_dict(),
                            **LIMITS[limits])


def _index_nodes(rebuilt: nn.Module) -> list[fx.Node]:
    return [n for n in rebuilt.graph.nodes if index_provenance._op(n) in index_provenance.INDEXING]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the index tensors whose values are read (``index_checks._bounds``)."""
    seen: list[tuple[int, ...]] = []
    bounds = index_checks._bounds

    def counted(t: torch.Tensor) -> tuple[int, int]:
        seen.append(tuple(t.shape))
        return bounds(t)

    monkeypatch.setattr(index_checks, "_bounds", counted)
    return seen


@pytest.mark.parametrize("limits", sorted(LIMITS))
@pytest.mark.parametrize("name", sorted(PROVEN))
def test_proven_indices_are_not_read_and_equal_eager(name: str, limits: str, reads: list) -> None:
    fn, args, other = PROVEN[name]
    rebuilt = _convert(fn, args, limits)
    nodes = _index_nodes(rebuilt)
    assert nodes and all(proven_indices(n) for n in nodes), [n.format_node() for n in nodes]
    for inputs in (args, other):
        assert torch.equal(rebuilt(*inputs), fn(*inputs))
    assert reads == []


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_proven_index_whose_shapes_do_not_settle_it_is_read_and_refused(limits: str, reads: list) -> None:
    fn, args, _ = PROVEN["sort_floor_divide"]
    rebuilt = _convert(fn, args, limits)
    x, y = torch.randn(3), torch.randn(8)  # indices // 2 reach 3: the bound (8 - 1) // 2 is not below 3
    with pytest.raises(IndexError):
        fn(x, y, args[2])
    with pytest.raises(IRError, match="refused before it runs"):
        rebuilt(x, y, args[2])
    assert reads == [(8,)]


@pytest.mark.parametrize("limits", sorted(LIMITS))
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_provenance_keeps_the_check(name: str, limits: str, reads: list) -> None:
    fn, honest, hostile = HOSTILE[name]
    rebuilt = _convert(fn, honest, limits)
    nodes = _index_nodes(rebuilt)
    assert nodes and not any(proven_indices(n) for n in nodes)
    assert torch.equal(rebuilt(*honest), fn(*honest))
    with pytest.raises(IndexError):
        fn(*hostile)
    with pytest.raises(IRError, match="refused before it runs"):
        rebuilt(*hostile)
    assert len(reads) >= 2


class _Constant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("order", torch.tensor([2, 0, 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.order]


def test_an_index_of_the_file_keeps_the_check() -> None:
    model = _Constant()
    ir = torch2ir.convert(model, (torch.randn(3),))
    rebuilt = ir2torch.convert(ir, {"order": torch.tensor([2, 9, 1])})
    assert not any(proven_indices(n) for n in _index_nodes(rebuilt))
    with pytest.raises(IRError, match="refused before it runs"):
        rebuilt(torch.randn(3))


def _graph(write: str) -> tuple[fx.Graph, fx.Node]:
    """``x[sort(y).indices]`` by hand, with the indices written in place (``write``: ``"direct"``, ``"view"``,
    ``"out"``, through another ``getitem`` of the sort), passed to a module (``"module"``) or not (``""``); returns
    the graph and its index node."""
    graph = fx.Graph()
    x, y, k = graph.placeholder("x"), graph.placeholder("y"), graph.placeholder("k")
    s = graph.call_function(operator.getitem, (graph.call_function(aten.sort.default, (y,)), 1))
    if write == "direct":
        graph.call_function(aten.add_.Tensor, (s, k))
    elif write == "view":
        graph.call_function(aten.add_.Tensor, (graph.call_function(aten.view.default, (s, [-1])), k))
    elif write == "out":
        graph.call_function(aten.add.out, (k, k), {"out": s})
    elif write == "module":
        graph.call_module("m", (s,))
    elif write == "second_getitem":  # the same tensor through another node of the sort's tuple
        graph.call_function(aten.add_.Tensor, (graph.call_function(operator.getitem, (s.args[0], 1)), k))
    index = graph.call_function(aten.index.Tensor, (x, [s]))
    graph.output(index)
    return graph, index


def test_indices_written_in_place_or_through_a_view_are_not_proven() -> None:
    assert proven_indices(_graph("")[1]) == ((0, -1, 1),)
    for write in ("direct", "view", "out", "module", "second_getitem"):
        assert proven_indices(_graph(write)[1]) == (), write


def _inverse_graph(**changes: Any) -> fx.Node:
    """Rule 3's ``index_put(empty_like(s), [s], arange(n))`` of a flattened sort, with ``changes`` to it."""
    graph = fx.Graph()
    y = graph.placeholder("y")
    flat = graph.call_function(aten.reshape.default, (y, changes.get("shape", [-1])))
    s = graph.call_function(operator.getitem, (graph.call_function(aten.sort.default, (flat,)), 1))
    target = graph.call_function(aten.empty_like.default, (s,), changes.get("empty_kwargs", {}))
    values = graph.call_function(aten.arange.default, changes.get("arange_args", (8,)))
    put = graph.call_function(aten.index_put_.default, (target, [s], values, *changes.get("accumulate", ())))
    graph.output(put)
    return put


def test_the_inverse_permutation_rule_is_narrow() -> None:
    assert bound_of(_inverse_graph()) == (0, 1)
    for changes in ({"shape": [2, -1]}, {"empty_kwargs": {"dtype": torch.int8}}, {"arange_args": (2, 8)},
                    {"accumulate": (True,)}):
        assert bound_of(_inverse_graph(**changes)) is None, changes


def test_settled_compares_shapes_only_for_integer_tensors() -> None:
    assert settled(torch.zeros(4, dtype=torch.long), -1, 2, 2)  # (4 - 1) // 2 = 1 < 2
    assert not settled(torch.zeros(5, dtype=torch.long), -1, 2, 2)
    assert not settled(torch.zeros(4, dtype=torch.int8), -1, 1, 8)
    assert not settled(torch.zeros((), dtype=torch.long), 0, 1, 8)
    assert not settled(torch.zeros(4, dtype=torch.long), 1, 1, 8)


def test_a_checked_call_copied_into_a_graph_that_does_not_prove_it_drops_the_proof() -> None:
    """A folded forward or a variant (a copy of the graph, rewritten) goes through ``checked_target`` again: a node
    whose indices the copy does not prove loses the proof its original had."""
    graph, index = _graph("")
    proven = checked_target(index.target, index)
    assert proven.func is node_checks._run_index_proven and proven.args[1] == ((0, -1, 1),)
    index.target = proven
    assert checked_target(proven, index) is proven  # the same graph: kept as it is
    index.args = (index.args[0], [graph.placeholder("planted")])  # a rewrite replaced the sort's indices
    plain = checked_target(proven, index)
    assert plain.func is node_checks._run_precondition and plain.overload is aten.index.Tensor
