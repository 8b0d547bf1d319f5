"""Every entry of ``ir2torch.run_safety.fast_ops.FAST`` runs exactly its ATen overload: same values, dtype, shape,
strides and aliasing as the boxed ``OpOverload`` call, for positional arguments and the keywords it accepts."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ir2torch.codegen.direct_op import DirectOp, direct_op
from ir2torch.run_safety.fast_ops import FAST, POSITIONAL_LIMITS, fast_binding
from ir2torch.run_safety.uninitialized import is_uninitialized

x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
sq = torch.randn(3, 3, generator=torch.Generator().manual_seed(1))
i32 = torch.arange(24, dtype=torch.int32).reshape(2, 3, 4)
q4 = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(2))
CALLS: dict[str, list[tuple[tuple, dict]]] = {
    "aten.add.Tensor": [((x, x), {}), ((x, 2), {}), ((i32, 0.5), {}), ((x, x), {"alpha": 3})],
    "aten.sub.Tensor": [((x, 1.5), {}), ((x, x), {"alpha": 2})],
    "aten.mul.Tensor": [((x, x), {}), ((i32, 0.25), {}), ((i32, 3), {})],
    "aten.div.Tensor": [((x, 3), {}), ((i32, 2), {})],
    "aten.neg.default": [((x,), {})], "aten.rsqrt.default": [((x.abs(),), {})], "aten.exp.default": [((x,), {})],
    "aten.tanh.default": [((x,), {})], "aten.cos.default": [((x,), {}), ((i32,), {})],
    "aten.sin.default": [((x,), {}), ((i32,), {})], "aten.sigmoid.default": [((x,), {})],
    "aten.relu.default": [((x,), {})],
    "aten.pow.Tensor_Scalar": [((x, 2), {}), ((x.abs(), 0.5), {}), ((i32, 2), {})],
    "aten.matmul.default": [((x, x.transpose(1, 2)), {})], "aten.bmm.default": [((x, x.transpose(1, 2)), {})],
    "aten.mm.default": [((sq, sq), {})],
    "aten.view.default": [((x, [6, -1]), {})], "aten.reshape.default": [((x.transpose(0, 1), [3, 8]), {})],
    "aten.transpose.int": [((x, 1, 2), {})], "aten.permute.default": [((x, [2, 0, 1]), {})],
    "aten.unsqueeze.default": [((x, 1), {})], "aten.squeeze.dim": [((x[:1], 0), {})],
    "aten.select.int": [((x, 1, -1), {})],
    "aten.expand.default": [((x[:1], [5, 3, 4]), {}), ((x[:1], [5, -1, -1]), {"implicit": False})],
    "aten.contiguous.default": [((x.transpose(1, 2),), {}), ((x,), {"memory_format": torch.contiguous_format})],
    "aten.clone.default": [((x.transpose(1, 2),), {}), ((x,), {"memory_format": torch.preserve_format})],
    "aten.cat.default": [(([x, x], -1), {}), (([x, x],), {})],
    "aten.split_with_sizes.default": [((x, [1, 2], 1), {}), ((x, [2]), {}), ((x, [3, 0, 1], -1), {})],
    "aten.mean.dim": [((x, [-1], True), {}), ((x, [0, 2]), {"keepdim": False, "dtype": torch.float64})],
    "aten.sum.dim_IntList": [((i32, [1]), {}), ((x, [-1]), {"keepdim": True})],
    "aten.softmax.int": [((x, -1), {}), ((x, -1, torch.float64), {}), ((x, 0), {"dtype": torch.float32})],
    "aten.dropout.default": [((x, 0.0, False), {}), ((x, 0.5, False), {})],
    "aten.to.dtype": [((x, torch.float32), {}), ((x, torch.float64), {}), ((i32, torch.bool), {"copy": True})],
    "aten.to.device": [((x, torch.device("cpu"), torch.float32), {}), ((i32, torch.device("cpu"), torch.bool), {}),
                       ((x, torch.device("cpu"), torch.float64, False, True), {}),
                       ((x, torch.device("cpu"), torch.float32), {"copy": True})],
    "aten.linear.default": [((x, torch.ones(5, 4)), {}), ((x, torch.ones(5, 4)), {"bias": torch.arange(5.0)})],
    "aten.gelu.default": [((x,), {}), ((x,), {"approximate": "tanh"})], "aten.silu.default": [((x,), {})],
    "aten.arange.default": [((8,), {}), ((5,), {"dtype": torch.int32, "device": torch.device("cpu"),
                                                 "pin_memory": False}), ((2.5,), {"layout": torch.strided})],
    "aten.zeros.default": [(([2, 3],), {}), (([4],), {"dtype": torch.int64, "device": torch.device("cpu"),
                                                      "pin_memory": False})],
    "aten.full.default": [(([2], 1.5), {}), (([3], 7), {"dtype": torch.int16}), (([1], True), {})],
    "aten.new_ones.default": [((x, [2]), {}), ((i32, [3]), {"dtype": torch.bool, "pin_memory": False})],
    "aten.ge.Scalar": [((x, 0), {}), ((i32, 2.5), {})], "aten.gt.Scalar": [((x, 0.5), {})],
    "aten.le.Scalar": [((i32, 3), {})], "aten.lt.Scalar": [((x, -0.5), {})],
    "aten.eq.Scalar": [((i32, 4), {})], "aten.ne.Scalar": [((i32, 0), {})],
    "aten.__and__.Tensor": [((x > 0, x < 1), {}), ((i32, i32 + 1), {})],
    "aten.where.self": [((x > 0, x, -x), {}), ((x > 0, i32.float(), x), {})],
    "aten.where.ScalarOther": [((x > 0, x, -3.4e38), {}), ((x > 0, i32, 0), {})],
    "aten.masked_fill.Scalar": [((x, x > 0, 0.5), {}), ((i32, i32 > 3, -1), {})],
    "aten._assert_tensor_metadata.default": [((x,), {}), ((x,), {"dtype": torch.float32, "device": torch.device(
        "cpu"), "layout": torch.strided}), ((x, [2, 3, 4]), {"stride": [12, 4, 1]})],
    "aten.stack.default": [(([x, x], 1), {}), (([x, x],), {})],
    "aten.flatten.using_ints": [((x, 1), {}), ((x.transpose(0, 1), 0, 1), {})],
    "aten.reshape_as.default": [((x, x.reshape(6, 4)), {}), ((x.transpose(1, 2), x.reshape(24)), {})],
    "aten.layer_norm.default": [((x, [4]), {}), ((x, [3, 4], torch.ones(3, 4), torch.zeros(3, 4), 1e-6), {})],
    "aten.addmm.default": [((torch.ones(3), sq, sq), {}), ((torch.ones(3), sq, sq), {"beta": 0.5, "alpha": 2})],
    "aten.embedding.default": [((sq, torch.tensor([[0, 2], [1, 1]])), {}), ((sq, torch.tensor([2, 0]), 0), {})],
    "aten.conv1d.default": [((x, torch.ones(5, 3, 2)), {}), ((x, torch.ones(4, 3, 3), torch.arange(4.0), [1], [1]),
                                                             {})],
    "aten.conv2d.default": [((x[None], torch.ones(2, 2, 2, 2)), {}),
                            ((x[None], torch.ones(4, 1, 1, 1), None, [1, 1], [0, 0], [1, 1], 2), {})],
    "aten.conv2d.padding": [((x[None], torch.ones(2, 2, 3, 3), None, [1, 1], "same"), {}),
                            ((x[None], torch.ones(2, 2, 2, 2), torch.ones(2), [1, 1], "valid"), {})],
    "aten.add_.Tensor": [((x.clone(), x), {}), ((x.clone(), 2), {}), ((x.clone(), x), {"alpha": 3})],
    "aten.mul_.Tensor": [((x.clone(), x), {}), ((i32.clone(), 3), {})],
    "aten.copy_.default": [((x.clone(), -x), {}), ((x.clone(), i32), {"non_blocking": False})],
    "aten.fill_.Tensor": [((x.clone(), torch.tensor(2.5)), {})],
    "aten.clamp.default": [((x, -0.5, 0.5), {}), ((x, None, 0.1), {}), ((i32, 2), {})],
    "aten.clamp_min.default": [((x, 0.0), {}), ((i32, 3), {})],
    "aten.expand_as.default": [((x[:1], x), {})],
    "aten.roll.default": [((x, [1], [2]), {}), ((x, [1, -1], [0, 1]), {})],
    "aten.pad.default": [((x, [1, 1]), {}), ((x, [0, 1, 2, 0], "constant", 0.5), {}), ((x, [1, 1], "reflect"), {})],
    "aten.topk.default": [((x, 2), {}), ((x, 3, 1, False, True), {}), ((i32, 1, 0), {})],
    "aten.div_.Tensor": [((x.clone(), x.abs() + 1), {}), ((x.clone(), 2), {})],
    "aten.sort.default": [((x,), {}), ((x, 1, True), {}), ((torch.tensor([3, 1, 2, 1]),), {})],
    "aten.floor_divide.default": [((i32, 2), {}), ((torch.tensor([5, -7, 9]), torch.tensor([2, 2, -4])), {}),
                                  ((x, 0.5), {})],
    "aten.histc.default": [((x,), {}), ((x, 4, 0, 3), {}), ((x, 5, -1.0, 1.0), {})],
    "aten.cumsum.default": [((x, 0), {}), ((x, -1), {"dtype": torch.float64}), ((i32, 1), {"dtype": torch.int32})],
    "aten.chunk.default": [((x, 2, -1), {}), ((x, 3), {}), ((x, 2, 1), {})],
    "aten.index_put_.default": [((x.clone(), [torch.tensor([1, 0])], torch.tensor(1.5)), {}),
                                ((i32.clone(), [torch.tensor([0, 1]), torch.tensor([2, 0])], torch.tensor([7, 8, 9, 10],
                                 dtype=torch.int32)), {"accumulate": True}),
                                ((x.clone(), [x > 0], torch.tensor(0.0), False), {})],
    "aten.empty_like.default": [((x,), {}), ((x.transpose(1, 2),), {}), ((i32,), {"dtype": torch.float64,
                                                                                     "pin_memory": False}),
                                ((x.transpose(0, 2),), {"memory_format": torch.contiguous_format})],
    "aten.scaled_dot_product_attention.default": [
        ((q4, q4, q4), {}), ((q4, q4, q4, q4[:1, :1, :, :1] > 0), {}), ((q4, q4, q4, None, 0.0, True), {}),
        ((q4, q4[:, :1], q4[:, :1]), {"scale": 0.25, "enable_gqa": True})],
    "aten.linalg_vector_norm.default": [((x,), {}), ((x, 2, [-1], True), {}), ((x, 1, [0]), {"dtype": torch.float64})],
}


class _Kernels(TorchDispatchMode):
    """Records the ATen overloads a call reaches below autograd."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _fresh(args: tuple, inplace: bool) -> tuple:
    return (args[0].clone(), *args[1:]) if inplace else args


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b)  # a list stays a list (a binding returning a tuple would change the output)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x_, y_ in zip(a, b):
            _same(x_, y_)
        return
    assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert torch.equal(a, b)


def test_every_entry_has_cases():
    assert set(CALLS) == set(FAST)


@pytest.mark.parametrize("name", sorted(FAST))
def test_binding_runs_its_overload(name):
    _, op, overload = name.split(".")
    boxed = getattr(getattr(torch.ops.aten, op), overload)
    for args, kwargs in CALLS[name]:
        fn = direct_op(boxed, kwargs, len(args))
        filled = is_uninitialized(boxed)  # the rebuild's allocation is zero-filled (its binding, wrapped)
        assert isinstance(fn, DirectOp) and fn == boxed
        assert (fn.func.__wrapped__ if filled else fn.func) is FAST[name][0]
        first = boxed._schema.arguments[0].alias_info
        inplace = first is not None and first.is_write  # each call writes a fresh copy of its first argument
        boxed_args, fast_args = _fresh(args, inplace), _fresh(args, inplace)
        with _Kernels() as boxed_run:
            expected = boxed(*boxed_args, **kwargs)
            if filled:
                expected.zero_()
        with _Kernels() as fast_run:
            got = fn(*fast_args, **kwargs)
        assert not inplace or (got is fast_args[0] and expected is boxed_args[0])  # both return what they wrote
        assert fast_run.ops == boxed_run.ops  # the same kernels, in the same order, below autograd
        if expected is None:  # a check (``_assert_tensor_metadata``)
            assert got is None
            continue
        _same(got, expected)
        if isinstance(args[0], torch.Tensor):  # a view (or ``to`` returning its input) in both or in neither
            first = args[0].untyped_storage().data_ptr()
            got_all, expected_all = (got, expected) if isinstance(got, (list, tuple)) else ([got], [expected])
            for g, e in zip(got_all, expected_all, strict=True):  # each piece of a split or a sort, too
                assert (g.untyped_storage().data_ptr() == first) == (e.untyped_storage().data_ptr() == first)


def _schema_sample(argument: Any) -> Any:
    """A value for one schema argument: its default, else a plain value of its type."""
    if argument.has_default_value():
        return argument.default_value
    kind = str(argument.real_type)
    if kind.startswith("Optional"):
        return None
    return {"Tensor": torch.ones(2, 2), "int": 1, "SymInt": 1, "List[int]": [2, 2], "List[SymInt]": [2, 2],
            "ScalarType": torch.float32, "Device": torch.device("cpu"), "number": 1, "bool": False, "float": 0.5,
            "str": "none", "List[Tensor]": [torch.ones(2, 2)],
            "List[Optional[Tensor]]": [torch.tensor([1, 0])]}[kind]


@pytest.mark.parametrize("name", sorted(FAST))
def test_a_binding_is_used_only_for_as_many_positional_arguments_as_it_takes(name):
    """Every positional count the schema allows either goes to the binding, which then accepts it, or takes the boxed
    path (``Tensor.to`` takes ``memory_format`` only as a keyword, ``aten.to.dtype`` positionally)."""
    _, op, overload = name.split(".")
    boxed = getattr(getattr(torch.ops.aten, op), overload)
    positional = [a for a in boxed._schema.arguments if not a.kwarg_only]
    args = [_schema_sample(a) for a in positional]
    required = sum(1 for a in positional if not a.has_default_value())
    for count in range(required, len(positional) + 1):
        binding = fast_binding(boxed, {}, count)
        if binding is None:
            assert count == len(positional) and name in POSITIONAL_LIMITS
            continue
        try:
            binding(*args[:count])
        except TypeError as exc:  # the binding's argument parser refused the call: never hand it one
            pytest.fail(f"{name} with {count} positional arguments: {exc}")
        except Exception:  # noqa: BLE001 - a kernel's own check on the plain samples (shapes, values)
            pass


def test_to_with_a_memory_format_rebuilds_exactly():
    """``x.to(dtype, memory_format=...)`` (Qwen3-Next, OLMo-hybrid) exports as ``aten.to.dtype`` with five positional
    arguments, which ``Tensor.to`` does not take."""
    import ir2torch
    import torch2ir

    class To(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (x.to(torch.float64, memory_format=torch.contiguous_format) * 2,
                    x.to(torch.float16, memory_format=torch.preserve_format) + 1)

    model, inp = To(), torch.randn(2, 3)
    for rebuilt in (ir2torch.convert(torch2ir.convert(model, (inp,)), {}),
                    ir2torch.convert(torch2ir.lower(model, (inp,)), {})):
        for got, expected in zip(rebuilt(inp), model(inp), strict=True):
            assert got.dtype == expected.dtype and torch.equal(got, expected)


def test_other_keywords_call_the_overload():
    add = torch.ops.aten.add.Tensor
    assert fast_binding(add, {"self": x}) is None
    slow = direct_op(add, {"self": x, "other": x})
    assert slow == add and slow.func is add  # the OpOverload itself: torch.compile traces it (its ``_op`` not)
    assert torch.equal(slow(self=x, other=x), x + x)
    assert direct_op(add, {}, 3).func is add  # more positional arguments than the schema takes


def test_a_failing_metadata_check_raises_through_the_binding_as_through_the_overload():
    boxed = torch.ops.aten._assert_tensor_metadata.default
    fn = direct_op(boxed, {"dtype": torch.float64}, 1)
    assert fn.func is torch._assert_tensor_metadata
    for call in (boxed, fn):
        with pytest.raises(RuntimeError, match="dtype"):
            call(x, dtype=torch.float64)


def test_one_graph_calling_an_overload_both_ways_runs_each_call_its_own_way():
    """``x.to(dtype)`` (the fast binding) and ``x.to(dtype, memory_format=...)`` (five positional arguments: the
    overload) in one graph: fx names globals by object, and the two callables used to compare equal, so both calls
    ran the binding, which refuses five positional arguments (Qwen3.5's linear attention, found by the sweep)."""
    import ir2torch
    import torch2ir

    class Both(torch.nn.Module):
        def forward(self, x):
            a = x.to(torch.float64)
            b = x.transpose(0, 1).to(torch.float64, memory_format=torch.contiguous_format)
            return a.sum(0) + b.sum(1)

    x = torch.randn(3, 4)
    ir = torch2ir.convert(Both(), (x,))
    calls = [ir["root"].node(n)["args"] for n in ir["root"].nodes if ir["root"].node(n).get("implementation") ==
             "aten.to.dtype"]
    assert sorted(len(a) for a in calls) == [2, 5]
    assert torch.equal(ir2torch.convert(ir, {})(x), Both()(x))
    fast, slow = direct_op(torch.ops.aten.to.dtype, {}, 2), direct_op(torch.ops.aten.to.dtype, {}, 5)
    assert fast == torch.ops.aten.to.dtype and slow == torch.ops.aten.to.dtype and fast != slow
