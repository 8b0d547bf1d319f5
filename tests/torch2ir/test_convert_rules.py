"""torch2ir conversion: handler registration rules, collected errors, and meta-device conversion."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import torch2ir
from common.errors import ConversionError, RegistryError
from common.ir import NODE_KINDS
from tests.models.zoo import by_name
from tests.torch2ir.cases import (
    all_graphs,
    call_nodes,
    converted,
)

# --------------------------------------------------------------------------------------------------------------
# Types, custom handlers
# --------------------------------------------------------------------------------------------------------------


class Linear(nn.Module):
    """A user block that happens to be called ``Linear``: not ``torch.nn.Linear``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.inner(x)) * 2


class HoldsUserLinear(nn.Module):
    """Calls the user ``Linear`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Linear()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + 1


def test_type_is_never_taken_from_a_class_name() -> None:
    ir = torch2ir.convert(HoldsUserLinear(), (torch.randn(2, 4),))
    assert ir["block"].type == "module"
    assert ir["block"].meta["class"] == f"{__name__}.Linear"
    assert ir["block"].graph.number_of_nodes() > 0
    assert ir["block"].data == {}
    assert [ir.root.node(n)["type"] for n in call_nodes(ir.root, "block")] == ["module"]
    assert ir["block.inner"].type == "linear"
    assert ir["block.inner"].data == {"in_features": 4, "out_features": 3, "bias": True}
    assert [ir["block"].node(n)["type"] for n in call_nodes(ir["block"], "block.inner")] == ["linear"]


class MyBlock(nn.Module):
    """A user block with an attribute its handler records."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)) + x


class HoldsMyBlock(nn.Module):
    """A model calling one :class:`MyBlock` between two functions."""

    def __init__(self) -> None:
        super().__init__()
        self.block = MyBlock(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x * 2).sum(-1)


def test_custom_handler_collapses_the_block() -> None:
    model = HoldsMyBlock().eval()
    x = torch.randn(3, 6)
    t2i = torch2ir.get_default_converter()
    t2i.register(MyBlock, lambda m: {"width": m.width}, type="myblock")
    ir = t2i.convert(model, (x,))
    calls = call_nodes(ir.root, "block")
    assert len(calls) == 1
    assert ir.root.node(calls[0])["type"] == "myblock"
    assert ir["block"].type == "myblock"
    assert ir["block"].data == {"width": 6}
    assert ir["block"].graph.number_of_nodes() == 0
    assert not any(call_nodes(g, "block.proj") for g in all_graphs(ir))  # inside the leaf: not traced apart
    assert ir["block.proj"].type == "linear"  # but still an implementation (the rebuild needs the path)
    ir.validate()

    # the default converter (and a fresh one) are unaffected
    assert not torch2ir.get_default_converter().has_handler(model.block)
    plain = torch2ir.convert(model, (x,))
    assert plain["block"].type == "module"
    assert plain["block"].graph.number_of_nodes() > 0
    assert [plain["block"].node(n)["type"] for n in call_nodes(plain["block"], "block.proj")] == ["linear"]


class Output(nn.Module):
    """A user leaf whose lowercased class name is a node kind."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class HoldsOutput(nn.Module):
    """Calls an :class:`Output` block before its real output."""

    def __init__(self) -> None:
        super().__init__()
        self.out = Output()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) + 1


@pytest.mark.parametrize("itype", [None, "input", "function", "get_attr", "module", "sequential", "modulelist"])
def test_handler_types_that_would_read_as_node_kinds_or_containers_are_refused(itype: str | None) -> None:
    t2i = torch2ir.get_default_converter()
    with pytest.raises(RegistryError, match="reserved"):
        t2i.register(Output, lambda m: {}, type=itype)  # None: the class name, "output"
    assert not t2i.has_handler(Output())
    with pytest.raises(RegistryError, match="reserved"):
        t2i.register_override(nn.Linear, lambda m: {}, type=itype or "output")
    t2i.register(Output, lambda m: {}, type="double")
    ir = t2i.convert(HoldsOutput(), (torch.randn(2, 3),))
    assert [ir.root.node(n)["type"] for n in call_nodes(ir.root, "out")] == ["double"]
    assert [n for n, a in ir.root.graph.nodes(data=True) if a["type"] == "output"] == ["output"]
    ir.validate()


# --------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------


class DataDependentBranch(nn.Module):
    """Python control flow on a tensor's value: not traceable by torch.export."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if h.sum() > 0:
            return h
        return -h


def test_untraceable_model_raises_conversion_error_with_exports_message() -> None:
    model = DataDependentBranch()
    x = torch.randn(2, 4)
    with pytest.raises(Exception) as direct:  # whatever export raises, its text must be kept
        torch.export.export(model, (x,), strict=False)
    with pytest.raises(ConversionError) as caught:
        torch2ir.convert(model, (x,))
    message = str(caught.value)
    assert "DataDependentBranch" in message
    assert str(direct.value).strip().splitlines()[0] in message
    assert isinstance(caught.value.__cause__, type(direct.value))


class BadA(nn.Module):
    """A leaf whose (custom) handler returns a lambda."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class BadB(nn.Module):
    """A leaf whose (custom) handler returns a tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class TwoProblems(nn.Module):
    """Two different unsupported leaves in one model."""

    def __init__(self) -> None:
        super().__init__()
        self.first_bad = BadA()
        self.ok = nn.Linear(4, 4)
        self.second_bad = BadB()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second_bad(self.ok(self.first_bad(x)))


def test_every_problem_is_reported_in_one_error() -> None:
    t2i = torch2ir.get_default_converter()
    t2i.register(BadA, lambda m: {"fn": lambda: 0})
    t2i.register(BadB, lambda m: {"table": torch.zeros(2)})
    with pytest.raises(ConversionError) as caught:
        t2i.convert(TwoProblems(), (torch.randn(2, 4),))
    message = str(caught.value)
    for path, cls in (("first_bad", "BadA"), ("second_bad", "BadB")):
        assert path in message and cls in message, message
    assert "'ok'" not in message and " ok:" not in message


@pytest.mark.parametrize("model", [lambda x: x, "model", torch.randn(2)], ids=["function", "str", "tensor"])
def test_non_module_is_a_type_error(model: Any) -> None:
    with pytest.raises(TypeError, match="nn.Module"):
        torch2ir.convert(model, (torch.randn(2),))


# --------------------------------------------------------------------------------------------------------------
# Meta device
# --------------------------------------------------------------------------------------------------------------


def _to_meta(value: Any) -> Any:
    return pytree.tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, value)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_meta_device_conversion_matches_cpu(name: str) -> None:
    case = by_name(name)
    with torch.device("meta"):
        model = case.build()
    assert all(p.is_meta for p in model.parameters())
    args, kwargs = _to_meta(case.inputs())
    ir = torch2ir.convert(model, args, kwargs)
    cpu = converted(name).ir
    assert list(ir) == list(cpu)
    for key in cpu:
        got, want = ir[key], cpu[key]
        assert (got.type, got.data, got.state, got.aliases) == (want.type, want.data, want.state, want.aliases), key
        assert got.meta["class"] == want.meta["class"]
    assert ir.root.meta["forward_arg_names"] == cpu.root.meta["forward_arg_names"]
    assert all(t.is_meta for t in ir.tensors.values())  # no value was made up
    assert all(t.is_meta for t in (*model.parameters(), *model.buffers()))  # nothing was materialised
    ir.validate()
    # the same modules are called from graphs, with the same multiplicity
    calls = Counter(
        a.get("implementation") for g in ir.values() for _, a in g.graph.nodes(data=True) if a["type"] not in NODE_KINDS
    )
    cpu_calls = Counter(
        a.get("implementation")
        for g in cpu.values()
        for _, a in g.graph.nodes(data=True)
        if a["type"] not in NODE_KINDS
    )
    assert calls == cpu_calls


def test_default_converters_are_independent_of_each_other():
    """``get_default_converter`` hands out copies: registering on one reaches neither the next nor the
    module-level ``convert``."""
    from common.errors import IRError

    class Custom(nn.Module):
        def forward(self, x):
            return x * 2

    first = torch2ir.get_default_converter()
    first.register(Custom, lambda module: {}, type="custom")
    first.allowlist.allow("mylib::*")
    second = torch2ir.get_default_converter()
    assert Custom in first._types and Custom not in second._types
    assert first.allowlist._patterns and not second.allowlist._patterns
    # the registered class is refused a second handler on the first converter only
    with pytest.raises(IRError):
        first.register(Custom, lambda module: {}, type="custom")
    second.register(Custom, lambda module: {}, type="custom")
