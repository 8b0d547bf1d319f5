"""Executors of FlatIR ops: registry rules, a torch.library custom op lowered and executed, overrides of ATen ops."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import DuplicateHandlerError, HandlerNotFoundError, IRError, UnsafeTargetError
from common.flat import FlatIR
from tests.flat.cases import built, full_state, lowered
from tests.helpers import max_abs_diff

OP = "t2i_flat_test.scale_shift.default"


@functools.cache
def _custom_op() -> object:
    """``t2i_flat_test::scale_shift(x, factor, *, shift=0.5)``, defined once per session (a non-ATen op)."""

    @torch.library.custom_op("t2i_flat_test::scale_shift", mutates_args=())
    def scale_shift(x: torch.Tensor, factor: float, *, shift: float = 0.5) -> torch.Tensor:
        return x * factor + shift

    @scale_shift.register_fake
    def _(x: torch.Tensor, factor: float, *, shift: float = 0.5) -> torch.Tensor:
        return torch.empty_like(x)

    return torch.ops.t2i_flat_test.scale_shift.default


class _UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(_custom_op()(self.lin(x), 3.0, shift=0.25))


def _lowered_custom() -> tuple[nn.Module, torch.Tensor, FlatIR]:
    torch.manual_seed(0)
    model = _UsesCustomOp().eval()
    x = torch.randn(2, 4)
    return model, x, torch2ir.lower(model, (x,), allow=["t2i_flat_test::*"])


def test_registry_semantics():
    converter = ir2torch.get_default_converter()
    assert len(converter.executors) == 0  # ATen ops need none: they resolve through the allow-list
    with pytest.raises(HandlerNotFoundError, match="no handler to override"):
        converter.executors.register_override(OP, lambda *a, **k: None)
    first = converter.executors.register(OP, lambda *a, **k: "first")
    with pytest.raises(DuplicateHandlerError, match="already has a handler"):
        converter.executors.register(OP, lambda *a, **k: "again")
    converter.executors.register_override(OP, lambda *a, **k: "scoped", where="block.*")
    assert converter.executors.get(OP, "root") is first
    assert converter.executors.get(OP, "block.0")() == "scoped"
    with pytest.raises(HandlerNotFoundError, match="no handler registered"):
        converter.executors.get("t2i_flat_test.other.default")
    copy = converter.copy()
    copy.executors.register("t2i_flat_test.other.default", lambda: None)
    assert "t2i_flat_test.other.default" not in converter.executors
    assert len(ir2torch.get_default_converter().executors) == 0  # fresh converters are independent


def test_custom_op_is_lowered_by_name_with_schema_named_arguments():
    _, _, flat = _lowered_custom()
    node = next(n for n in flat.nodes if n.op_type == OP)
    assert list(node.args) == ["x", "factor"] and node.args["factor"] == 3.0
    assert node.kwargs == {"shift": 0.25}
    assert node.outputs[0].shape == [2, 4]


def test_custom_op_runs_through_a_registered_executor(tmp_path):
    model, x, flat = _lowered_custom()
    seen = []

    def executor(x: torch.Tensor, factor: float, *, shift: float) -> torch.Tensor:
        seen.append((factor, shift))
        return x * factor + shift

    converter = ir2torch.get_default_converter()
    converter.executors.register(OP, executor)
    module = converter.convert(flat, model.state_dict())
    with torch.no_grad():
        module(x)  # the first call of a signature is probed on fake tensors first, executors included
        seen.clear()
        assert max_abs_diff(model(x), module(x)) == 0.0
    assert seen == [(3.0, 0.25)]
    # from a file: the converter accepts the op names it has executors for
    path = flat.save(tmp_path / "custom.flat.json")
    with pytest.raises(UnsafeTargetError, match=OP.replace(".", r"\.")):
        FlatIR.load(path)
    with torch.no_grad():
        assert max_abs_diff(model(x), converter.convert(path, model.state_dict())(x)) == 0.0


def test_custom_op_without_executor_is_a_clear_ir_error_naming_the_node():
    model, _, flat = _lowered_custom()
    node = next(n for n in flat.nodes if n.op_type == OP)
    with pytest.raises(IRError, match="has no registered executor") as info:
        ir2torch.convert(flat, model.state_dict())
    assert info.value.node == node.name
    assert "executors.register" in str(info.value)


def test_executor_for_an_aten_op_replaces_it_where_scoped():
    b = built("bert")
    flat = lowered("bert")
    calls: list[tuple[int, ...]] = []

    def counting_gelu(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        calls.append(tuple(x.shape))
        return torch.ops.aten.gelu.default(x, *args, **kwargs)

    converter = ir2torch.get_default_converter()
    converter.executors.register("aten.gelu.default", counting_gelu)
    converter.executors.register_override("aten.gelu.default", lambda x, *a, **k: torch.zeros_like(x),
                                          where="encoder.layer.1.*")
    module = converter.convert(flat, full_state(b.model))
    with torch.no_grad():
        module(*b.args, **b.kwargs)  # the first call of a signature is probed on fake tensors first
        calls.clear()
        out = module(*b.args, **b.kwargs)
    assert calls == [(2, 8, 128)]  # layer 0 through the base executor; layer 1 through the scoped override
    assert max_abs_diff(b.expected.pooler_output, out.pooler_output) > 1e-3
