"""Constant folding of rebuilt graphs (ir2torch.codegen.constant_fold, ir2torch.codegen.fold_cache): what is folded,
what is refused (views reaching the output, randomness, symbolic sizes), and that the folded module
behaves as the plain one everywhere (hooks, deep copies, state, tracers, the fixpoint). Copies of escaping values
and lifted constants: test_constant_fold_copies.py."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import ir2torch
import torch2ir
from ir2torch.codegen.constant_fold import overload_of, plan_fold
from ir2torch.codegen.fold_cache import FOLD_ATTR, VALUES_ATTR


class _Mask(nn.Module):
    """An all-true lower-triangle mask built from ``arange`` / ``ge`` of static sizes, then used with a weight."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idx = torch.arange(4)
        mask = (idx[None, :] >= idx[:, None]).to(torch.float32)
        return self.lin(x) @ mask + mask.sum(0)


class _InPlaceConsumer(nn.Module):
    """A constant chain whose last value an in-place op (fed by the input) mutates."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = (torch.arange(4.0) + 1) * 2
        c.add_(x)
        return c * 3


class _InternalMutation(nn.Module):
    """In-place ops inside the constant part (as BEiT's relative-position index): folded with them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = torch.arange(6).view(2, 3).contiguous() * 1
        c[:, 0] += 5
        c[1].mul_(2)
        return x + c.sum(0)


class _ViewToOutput(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = (torch.arange(4.0) + 1) * 2
        return x + 1, c.view(2, 2)


class _ConstantOutput(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = (torch.arange(4.0) + 1) * 2
        return x + 1, c


class _Bump(nn.Module):
    def forward(self, t: torch.Tensor) -> torch.Tensor:
        t.add_(1)
        return t * 2


class _IntoSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bump = _Bump()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = (torch.arange(4.0) + 1) * 2
        return x + self.bump(c)


class _Random(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(4) * 2 + 1
        return x + noise + torch.arange(4.0).mul(3).sum()


def _rebuild(model: nn.Module, *args: torch.Tensor, fold: bool = True) -> tuple:
    ir = torch2ir.convert(model, args)
    return ir, ir2torch.convert(ir, model.state_dict(), fold_constants=fold)


def _folded_ops(rebuilt: nn.Module) -> set[str]:
    """Names of the ATen ops the root's fold computes once."""
    constants = frozenset(n for n, v in vars(rebuilt).items() if type(v) is torch.Tensor)  # lifted: plain attributes
    plan = plan_fold(rebuilt.graph, constants)
    return set() if plan is None else {str(overload_of(n)) for n in plan.folded if overload_of(n) is not None}


def _aten_ops(module: nn.Module, *args: torch.Tensor) -> Counter:
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*args)
    return Counter({e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")})


class _CountOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def test_a_constant_mask_is_computed_once_and_gives_the_same_outputs() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    _, plain = _rebuild(model, x, fold=False)
    _, folded = _rebuild(model, x)
    assert FOLD_ATTR in folded.__dict__ and FOLD_ATTR not in plain.__dict__
    assert {"aten.arange.default", "aten.ge.Tensor"} <= _folded_ops(folded)
    for _ in range(3):
        assert torch.equal(folded(x), model(x)) and torch.equal(plain(x), model(x))
    ran, plain_ran = _aten_ops(folded, x), _aten_ops(plain, x)
    assert plain_ran["aten::arange"] >= 1 and ran["aten::arange"] == 0 and ran["aten::ge"] == 0
    assert sum(ran.values()) < sum(plain_ran.values())


def test_an_in_place_consumer_writes_a_fresh_copy_of_the_constant() -> None:
    x = torch.randn(4)
    _, folded = _rebuild(_InPlaceConsumer(), x)
    ops = _folded_ops(folded)
    assert ops == {"aten.arange.default", "aten.add.Tensor", "aten.mul.Tensor"}  # ``c``, which ``add_`` writes
    for _ in range(3):  # a cached ``c`` written in place would grow by ``x`` on every call
        assert torch.equal(folded(x), _InPlaceConsumer()(x))
    assert _aten_ops(folded, x)["aten::clone"] == 1  # the copy ``add_`` writes


def test_mutations_inside_the_constant_part_are_folded_with_it() -> None:
    x = torch.randn(3)
    _, plain = _rebuild(_InternalMutation(), x, fold=False)
    _, folded = _rebuild(_InternalMutation(), x)
    assert {"aten.add_.Tensor", "aten.mul_.Tensor", "aten.sum.dim_IntList"} <= _folded_ops(folded)
    for _ in range(3):
        assert torch.equal(folded(x), _InternalMutation()(x)) and torch.equal(plain(x), folded(x))
    assert _aten_ops(folded, x)["aten::add_"] == 0


def test_a_view_of_a_constant_reaching_the_output_is_recomputed() -> None:
    x, model = torch.randn(4), _ViewToOutput()
    _, folded = _rebuild(model, x)
    assert "aten.mul.Tensor" not in _folded_ops(folded)  # the class of the returned view stays in the graph
    first = folded(x)[1]
    first.add_(100)  # the caller owns what it got back
    assert torch.equal(folded(x)[1], model(x)[1]) and folded(x)[1]._base is not None  # a view, as eager's


def test_random_ops_are_never_folded() -> None:
    x = torch.zeros(4)
    _, folded = _rebuild(_Random(), x)
    ops = _folded_ops(folded)
    assert "aten.arange.start_step" in ops or "aten.arange.default" in ops
    assert not any("rand" in op for op in ops) and "aten.mul.Tensor" in ops
    torch.manual_seed(0)
    expected = _Random()(x)
    torch.manual_seed(0)
    assert torch.equal(folded(x), expected)
    assert not torch.equal(folded(x), expected)  # fresh noise on the next call


def test_state_and_modules_are_the_same_with_and_without_folding() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    _, plain = _rebuild(model, x, fold=False)
    _, folded = _rebuild(model, x)
    folded(x)
    assert folded.state_dict().keys() == plain.state_dict().keys() == model.state_dict().keys()
    assert [n for n, _ in folded.named_buffers()] == [n for n, _ in plain.named_buffers()]
    assert [n for n, _ in folded.named_parameters()] == [n for n, _ in plain.named_parameters()]
    assert [n for n, _ in folded.named_modules()] == [n for n, _ in plain.named_modules()]
    assert folded.code == plain.code  # the module's own forward is the IR's graph


def test_converting_a_folded_rebuild_gives_the_same_ir() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    ir, folded = _rebuild(model, x)
    folded(x)  # values cached before the trace
    assert torch2ir.convert(folded, (x,)) == ir
    model = _InternalMutation()
    ir, folded = _rebuild(model, torch.randn(3))
    folded(torch.randn(3))
    assert torch2ir.convert(folded, (torch.randn(3),)) == ir


def test_dispatch_modes_and_vmap_see_every_op() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    _, plain = _rebuild(model, x, fold=False)
    _, folded = _rebuild(model, x)
    folded(x)
    counts = []
    for module in (plain, folded):
        with _CountOps() as mode:
            module(x)
        counts.append(mode.ops)
    assert counts[0] == counts[1] and counts[1]["aten.arange.default"] >= 1
    xs = torch.randn(3, 2, 4)
    assert torch.equal(torch.func.vmap(folded)(xs), torch.func.vmap(plain)(xs))


def test_hooks_run_on_the_folded_forward() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    _, folded = _rebuild(model, x)
    seen = []
    folded.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    folded.register_forward_hook(lambda m, args, out: seen.append(out) or out + 1)
    out = folded(x)
    assert torch.equal(out, model(x * 2) + 1) and torch.equal(seen[0], model(x * 2))
    assert "forward" not in folded.__dict__  # the folded forward is only the instance's for the call


def test_an_override_of_a_child_still_runs_inside_the_folded_forward() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    rebuilder = ir2torch.get_default_converter()
    built = []

    def doubled(impl):
        built.append(impl.name)
        return nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    rebuilder.register_override("linear", doubled)
    swapped = rebuilder.convert(ir)
    assert set(built) == {"lin"} and FOLD_ATTR in swapped.__dict__
    expected = swapped.lin(x) @ torch.triu(torch.ones(4, 4)) + torch.triu(torch.ones(4, 4)).sum(0)
    assert torch.equal(swapped(x), expected)


def test_deep_copies_get_their_own_fold() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    _, folded = _rebuild(model, x)
    folded(x)
    twin = copy.deepcopy(folded)
    assert twin.__dict__[FOLD_ATTR] is not folded.__dict__[FOLD_ATTR] and VALUES_ATTR not in twin.__dict__
    assert torch.equal(twin(x), model(x)) and _aten_ops(twin, x)["aten::arange"] == 0
    assert twin.__dict__[VALUES_ATTR][0] is not folded.__dict__[VALUES_ATTR][0]


def test_dtype_inference_mode_and_recompile_follow_the_plain_forward() -> None:
    model = _Mask().eval()
    x = torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    plain = ir2torch.convert(ir, model.state_dict(), fold_constants=False, guard_inputs=False)
    folded = ir2torch.convert(ir, model.state_dict(), guard_inputs=False)
    with torch.inference_mode():
        assert torch.equal(folded(x), plain(x))
    out = folded(x)  # outside inference mode again: values recomputed as normal tensors
    out.sum().backward()
    assert folded.lin.weight.grad is not None
    for module in (copy.deepcopy(plain), copy.deepcopy(folded)):  # the mask is a float32 literal: a float64
        with pytest.raises(RuntimeError, match="same dtype"):  # model fails the same way, folded or not
            module.double()(x.double())
    folded.recompile()  # a recompiled graph may differ: the fold steps aside
    assert torch.equal(folded(x), plain(x)) and _aten_ops(folded, x)["aten::arange"] >= 1


class _SizedByInput(nn.Module):
    """A mask of the input's (dynamic) length next to one of a fixed length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(x.shape[0])
        fixed = (torch.arange(4) * 2).sum()
        return x + (n[:, None] >= n[None, :]).sum(1)[:, None] + fixed


def test_symbolic_sizes_are_never_folded() -> None:
    model = _SizedByInput()
    dim = torch.export.Dim("n", min=2, max=16)
    ir = torch2ir.convert(model, (torch.randn(5, 3),), dynamic_shapes={"x": {0: dim}})
    folded = ir2torch.convert(ir)
    plan = plan_fold(folded.graph)
    assert plan is not None and len([n for n in plan.folded if "arange" in str(overload_of(n))]) == 1
    for rows in (5, 9, 3, 9):
        x = torch.randn(rows, 3)
        assert torch.equal(folded(x), model(x))
