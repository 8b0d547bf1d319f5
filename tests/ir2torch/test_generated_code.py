"""What rebuilt graph modules run: direct ATen entry points, no check-only asserts, plain grad-mode blocks.

These are the forward-speed measures of ``ir2torch.rebuild.graphs`` (see docs/performance.md); each test checks
that the fast form computes what eager PyTorch computes and stays usable by graph passes and re-export.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import fx, nn

import ir2torch
import torch2ir
from ir2torch.codegen.direct_op import DirectOp, direct_op
from ir2torch.guards.check import InputGuard
from tests.helpers import converted, max_abs_diff


class _Casts(nn.Module):
    """``.to(dtype)`` makes export record ``aten._assert_tensor_metadata`` checks next to each cast."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x.to(torch.float32)).to(torch.float64)
        return torch.relu(h) * 2


def _call_targets(gm: fx.GraphModule) -> list:
    """Call targets of the graph's ops (not the input guard's call)."""
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and not isinstance(n.target, InputGuard)]


def test_direct_op_is_equal_to_its_overload_and_runs_the_same() -> None:
    op = direct_op(torch.ops.aten.add.Tensor)
    assert isinstance(op, DirectOp)
    assert op.overload is torch.ops.aten.add.Tensor
    assert op == torch.ops.aten.add.Tensor and torch.ops.aten.add.Tensor == op
    assert op != torch.ops.aten.mul.Tensor
    assert {torch.ops.aten.add.Tensor: "add"}[op] == "add"
    assert direct_op(torch.ops.aten.add.Tensor) is op  # one object per overload
    a, b = torch.randn(3), torch.randn(3)
    assert torch.equal(op(a, b), torch.ops.aten.add.Tensor(a, b))
    assert direct_op(torch.relu) is torch.relu  # anything that is not an OpOverload is left alone


def test_generated_code_names_ops_and_graph_passes_still_match_them() -> None:
    torch.manual_seed(0)
    model = _Casts().eval()
    x = torch.randn(2, 4, dtype=torch.float64)
    new = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    code = new.code
    assert "aten_relu_default(" in code and "torch.ops.aten" not in code
    targets = _call_targets(new)
    assert torch.ops.aten.relu.default in targets  # == on a DirectOp compares with the overload
    assert all(isinstance(t, DirectOp) for t in targets)
    assert "aten.relu.default" in str(new.graph)
    assert torch.equal(new(x), model(x))


def test_unused_metadata_asserts_are_left_out_of_the_rebuilt_graph() -> None:
    torch.manual_seed(0)
    model = _Casts().eval()
    x = torch.randn(2, 4, dtype=torch.float64)
    ir = torch2ir.convert(model, (x,))
    check = "aten._assert_tensor_metadata.default"
    kept = [n for n, a in ir.root.graph.nodes(data=True) if a.get("implementation") == check]
    assert kept, "the IR keeps what export recorded"
    new = ir2torch.convert(ir, model.state_dict())
    assert "_assert_tensor_metadata" not in new.code
    assert max_abs_diff(model(x), new(x)) == 0.0


def test_no_grad_region_runs_as_a_grad_mode_block_with_the_same_gradients() -> None:
    _, model, args, _, ir = converted("no_grad_inside")
    new = ir2torch.convert(ir, model.state_dict())
    frozen_code = new.frozen.code
    assert "wrap_with_set_grad_enabled" not in frozen_code and "run_with_grad_enabled" in frozen_code
    x = args[0].clone().requires_grad_(True)
    y = x.detach().clone().requires_grad_(True)
    model(x).sum().backward()
    new(y).sum().backward()
    assert torch.equal(x.grad, y.grad)
    assert new.frozen.lin.weight.grad is None and model.frozen.lin.weight.grad is None  # under no_grad in both
    assert torch.equal(new.head.weight.grad, model.head.weight.grad)
    model.zero_grad(set_to_none=True)
    new.zero_grad(set_to_none=True)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")  # torch's own
def test_rebuilt_models_deepcopy_retrace_and_reexport(name: str) -> None:
    _, model, args, kwargs, ir = converted(name)
    new = ir2torch.convert(ir, model.state_dict())
    expected = model(*args, **kwargs)
    assert max_abs_diff(expected, copy.deepcopy(new)(*args, **kwargs)) == 0.0
    ep = torch.export.export(new, args, kwargs)
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert not any(isinstance(t, DirectOp) for t in ops), "export records the OpOverloads themselves"
    assert max_abs_diff(expected, ep.module()(*args, **kwargs)) == 0.0


class _Pair(nn.Module):
    def forward(self, x: torch.Tensor, pair: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"sum": x + pair[0], "prod": x * pair[1]}


class _PairParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = _Pair()

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.child(x, (x + 1, x * 2))


def test_nested_tuple_argument_and_dict_output_bind_without_pytree_calls():
    from common.errors import InputMismatchError

    model, x = _PairParent(), torch.randn(2, 3)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    code = rebuilt.child.code
    assert "tree_flatten_spec" not in code and "tree_unflatten" not in code, code
    expected = model(x)
    got = rebuilt(x)
    assert type(got) is dict and list(got) == ["sum", "prod"]
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    # the child takes a list too (as the pytree call did), and refuses what is not a sequence or has another length
    pair = (x + 1, x * 2)
    assert torch.equal(rebuilt.child(x, list(pair))["prod"], model.child(x, pair)["prod"])
    with pytest.raises(InputMismatchError, match="'pair' is a dict"):
        rebuilt.child(x, {0: pair[0], 1: pair[1]})
    with pytest.raises(Exception, match="unpack"):
        rebuilt.child(x, (*pair, x))


class _NamesLikeGenerated(nn.Module):
    """Forward arguments named like the globals generated code uses (its own and fx's op names)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seq = nn.Sequential(nn.ReLU())

    def forward(self, _ir_call_module, _ir_child, _ir_child_1, aten_add_Tensor, _ir_out_fn_0=None,
                _ir_out_ctx_0=None, _ir_sequences=None, _ir_not_a_sequence=None):
        h = _ir_call_module + _ir_child[0] + _ir_child[1] + _ir_child_1 + aten_add_Tensor
        y = self.seq[0](self.lin(h))
        return {"a": y, "b": [y, (y * 2,)]}


def test_arguments_named_like_generated_globals_do_not_shadow_them() -> None:
    """An argument may be called ``_ir_call_module`` or ``aten_add_Tensor``: the generated code's globals then take
    other names, and the rebuilt model computes what eager does (it used to call the argument)."""
    model = _NamesLikeGenerated().eval()
    x = torch.randn(2, 4)
    args = (x, (x + 1, x + 2), x + 3)
    kwargs = {"aten_add_Tensor": x + 4}
    rebuilt = ir2torch.convert(torch2ir.convert(model, args, kwargs), model.state_dict())
    new = (torch.randn(2, 4), (torch.randn(2, 4), torch.randn(2, 4)), torch.randn(2, 4))
    new_kwargs = {"aten_add_Tensor": torch.randn(2, 4)}
    with torch.no_grad():
        got, want = rebuilt(*new, **new_kwargs), model(*new, **new_kwargs)
    assert torch.equal(got["a"], want["a"]) and torch.equal(got["b"][1][0], want["b"][1][0])
    assert "_ir_call_module_" in rebuilt.code and "_ir_out_fn_0_" not in rebuilt.code
