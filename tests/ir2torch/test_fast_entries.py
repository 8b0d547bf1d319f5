"""The folded forward's entries of ``aten.index.Tensor`` (``Tensor.__getitem__`` of one index tensor) and of the
overloads without a Python binding (``OpOverload._op``), :mod:`ir2torch.codegen.fast_paths`: each runs exactly its
overload (the same ATen ops seen by a dispatch mode, values, dtype, shape and strides), raises what the overload
raises, and a checked index node still checks its indices first, refusing what it refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ir2torch.codegen import fast_paths
from ir2torch.codegen.direct_op import DirectOp, direct_op
from ir2torch.run_safety import node_checks
from ir2torch.run_safety.node_checks import CheckedCall, checked_target, with_call
from tests.ir2torch.test_fast_ops import _Kernels as _Ops  # records the ATen overloads a call dispatches

_INDEX = torch.ops.aten.index.Tensor
x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
i32 = torch.arange(24, dtype=torch.int32).reshape(2, 3, 4)
_MAX = 9223372036854775807

#: (self, indices) that ``tensor_index`` runs as ``self[index]``
FAST = [(x, [torch.tensor([1, 0, 1])]), (x, [torch.tensor([[0], [1]])]), (x, [torch.tensor([-1, 0])]),
        (x.transpose(0, 2), [torch.tensor([3, 0], dtype=torch.int32)]), (i32, (torch.tensor([1]),)),
        (x[:, 0], [torch.tensor([], dtype=torch.int64)]), (x.reshape(24), [torch.tensor([23, 0, 5])])]
#: (self, indices) that it runs through the overload: a 0-dim index (``__getitem__`` would ``select``), masks,
#: several or absent indices, a 0-dim ``self``, a float index
SLOW = [(x, [torch.tensor(1)]), (x, [torch.tensor([True, False])]), (x, [torch.tensor([1, 0], dtype=torch.uint8)]),
        (x, [None, torch.tensor([2, 0])]), (x, [torch.tensor([1]), torch.tensor([2])]), (torch.tensor(3.0),
        [torch.tensor([0])]), (x, [torch.tensor([0.0])]), (x, [])]


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert torch.equal(a, b)


def _outcome(call: Any, *args: Any) -> tuple[Any, list[str]]:
    """What ``call(*args)`` returns or raises (type and message), and the ops it dispatched."""
    with _Ops() as ops:
        try:
            return call(*args), ops.ops
        except Exception as exc:  # noqa: BLE001 - compared with what the overload raises
            return (type(exc), str(exc)), ops.ops


def _refuse_overload(*args: Any) -> None:
    raise AssertionError("the overload was called")


@pytest.mark.parametrize("case", range(len(FAST)))
def test_index_runs_exactly_the_overload_through_getitem(case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    self, indices = FAST[case]
    expected, expected_ops = _outcome(_INDEX, self, indices)
    monkeypatch.setattr(fast_paths, "_INDEX", _refuse_overload)  # the fast entry alone runs it
    got, got_ops = _outcome(fast_paths.tensor_index, self, indices)
    assert got_ops == expected_ops == ["aten.index.Tensor"]
    _same(got, expected)


@pytest.mark.parametrize("case", range(len(SLOW)))
def test_index_runs_the_overload_where_getitem_would_differ(case: int) -> None:
    self, indices = SLOW[case]
    expected, expected_ops = _outcome(_INDEX, self, indices)
    got, got_ops = _outcome(fast_paths.tensor_index, self, indices)
    assert got_ops == expected_ops
    if isinstance(expected, tuple):  # refused by the overload: the same error
        assert got == expected
    else:
        _same(got, expected)


def test_index_out_of_range_raises_as_the_overload() -> None:
    for self, index in ((x, torch.tensor([2])), (x, torch.tensor([-3, 0])), (i32.reshape(24), torch.tensor([24]))):
        expected, _ = _outcome(_INDEX, self, [index])
        assert isinstance(expected, tuple) and expected[0] is IndexError
        assert _outcome(fast_paths.tensor_index, self, [index])[0] == expected


def test_a_checked_index_checks_before_the_fast_entry() -> None:
    """The node's check (its indices read, or proven from the graph where their shapes settle it) runs first and
    refuses an out-of-range index, as the checked overload does; the fast entry is the call it makes."""
    plain = checked_target(_INDEX)
    proven = node_checks._named(CheckedCall(node_checks._run_index_proven, "aten.index.Tensor", ((0, 0, 1),),
                                            _INDEX, "aten.index.Tensor"), _INDEX, _INDEX)
    for target in (plain, proven):
        fast = with_call(target, fast_paths.tensor_index)
        assert fast == _INDEX and fast.func is target.func and fast_paths.tensor_index in fast.args
        for bad in (torch.tensor([0, 1, 2]), torch.tensor([5, 0, 0])):  # 3 > 2 rows: shapes do not settle it
            for call in (target, fast):
                with pytest.raises(RuntimeError, match="refused before it runs"):
                    call(x, [bad])
        good = torch.tensor([1, 0])
        _same(fast(x, [good]), target(x, [good]))
    data_checked = node_checks._named(CheckedCall(node_checks._run_data_checked, _INDEX), _INDEX, _INDEX)
    assert with_call(data_checked, fast_paths.tensor_index) is data_checked


@pytest.mark.parametrize(("overload", "calls"), [
    (torch.ops.aten.slice.Tensor, [(x, 1, 0, 2), (x, -1, 1, _MAX), (x, 0, 5, 10), (x, 2, 0, 4), (x, 3, 0, 1),
                                   (x.transpose(1, 2), 1, -2, _MAX)]),
    (torch.ops.aten.sym_size.int, [(x, 1), (x, -1), (x, 3)]),
    (torch.ops.aten.index.Tensor, [(x, [torch.tensor([1])]), (x, [torch.tensor([7])])]),
])
def test_boxed_entry_runs_the_overload(overload: Any, calls: list[tuple]) -> None:
    op = fast_paths.boxed(overload)
    assert isinstance(op, DirectOp) and op == overload and op.func is overload._op
    for args in calls:
        expected, expected_ops = _outcome(overload, *args)
        got, got_ops = _outcome(op, *args)
        assert got_ops == expected_ops
        if isinstance(expected, torch.Tensor):
            _same(got, expected)
        else:  # a size, or the same error
            assert got == expected


class _Marked(torch.Tensor):
    """A tensor subclass: the entry hands it to ``Tensor.to`` (its ``__torch_function__`` sees the call)."""


#: (tensor, dtype) that ``aten.to.dtype`` returns as it is, then ones it converts or runs through the binding
TO_SAME = [(x, torch.float32), (x.transpose(0, 2), torch.float32), (i32, torch.int32), (x[:, 1], torch.float32),
           (torch.tensor(2.0, dtype=torch.float64), torch.float64), (torch.zeros(0, 3, dtype=torch.bool), torch.bool)]
TO_OTHER = [(x, torch.float64), (x, torch.bfloat16), (i32, torch.float32), (x.transpose(0, 2), torch.int64),
            (torch.tensor([True, False]), torch.float32), (x.as_subclass(_Marked), torch.float32)]


@pytest.mark.parametrize("case", range(len(TO_SAME) + len(TO_OTHER)))
def test_to_dtype_entry_returns_what_the_overload_returns(case: int) -> None:
    """The input itself where the overload returns it (the same object: a write through either is seen by both),
    else the same conversion (values, dtype, strides; the ops a dispatch mode sees)."""
    tensor, dtype = (TO_SAME + TO_OTHER)[case]
    expected, expected_ops = _outcome(torch.ops.aten.to.dtype, tensor, dtype)
    got, got_ops = _outcome(fast_paths.to_dtype, tensor, dtype)
    assert got_ops == expected_ops
    assert (got is tensor) == (expected is tensor)
    if case < len(TO_SAME) or type(tensor) is _Marked:
        assert expected is tensor  # (the subclass's cast reaches the overload, which returns it too)
    else:
        assert expected is not tensor
    assert type(got) is type(expected)
    _same(torch.Tensor(got) if type(got) is _Marked else got, torch.Tensor(expected) if type(expected) is _Marked
          else expected)


def test_to_dtype_entry_replaces_plain_casts_only() -> None:
    """A folded forward's ``aten.to.dtype(x, dtype)`` becomes the entry; one with more arguments, or a checked
    call (which keeps its check), does not."""
    from torch import fx

    graph = fx.Graph()
    t = graph.placeholder("t")
    plain = graph.call_function(direct_op(torch.ops.aten.to.dtype, {}, 2), (t, torch.float32))
    assert isinstance(plain.target, DirectOp) and plain.target.func is torch.Tensor.to
    overload = graph.call_function(torch.ops.aten.to.dtype, (plain, torch.float32))
    copied = graph.call_function(torch.ops.aten.to.dtype, (overload, torch.float32), {"copy": True})
    to = torch.ops.aten.to.dtype
    checked = graph.call_function(node_checks._named(CheckedCall(node_checks._run_data_checked, to), to, to),
                                  (copied, torch.float32))
    graph.output(checked)
    fast_paths.rewrite(graph)
    assert plain.target is overload.target is fast_paths.to_dtype
    assert copied.target is not fast_paths.to_dtype and isinstance(checked.target, CheckedCall)
