"""Opaque leaves (``opaque="auto"`` / ``opaque=[classes]``): a module torch.export cannot trace is kept as a leaf
of type ``"opaque"``, rebuilt (with ``allow=``) as its own class running its own forward; everything around it is
traced and typed as usual."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import ConversionError, IRError, UnsafeTargetError
from torch2ir.frontend.export import ExportFailedError


class Gate(nn.Module):
    """A data-dependent branch torch.export cannot trace, a child, a buffer and plain attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("offset", torch.linspace(-1, 1, 4))
        self.scale = 2.0
        self.modes = ("a", ["b", None], {"k": 3})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.lin(x) * self.scale + self.offset
        return torch.tanh(x) - self.offset


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        with torch.no_grad():  # the input's sign picks the gate's branch
            self.pre.weight.copy_(torch.eye(4))
            self.pre.bias.zero_()
        self.gate = Gate()
        self.post = nn.Sequential(nn.Linear(4, 3), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.gate(self.pre(x)) + x)


GATE = f"{__name__}.Gate"
X = torch.randn(2, 4).abs()  # the positive branch
BRANCHES = (X, -X)


def _model() -> Model:
    torch.manual_seed(0)
    return Model().eval()


def _converted(**options: object) -> tuple[Model, IR]:
    model = _model()
    return model, torch2ir.convert(model, (X,), **({"opaque": "auto"} | options))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_auto_keeps_the_failing_module_as_an_opaque_leaf() -> None:
    _, ir = _converted()
    assert ir.capture.opaque == [("gate", GATE, ir.capture.opaque[0][2])]
    assert ir.capture.opaque[0][2].startswith("GuardOnDataDependentSymNode")
    assert ir["gate"].type == "opaque"
    assert ir["gate"].data == {"class": GATE, "attributes": {"scale": 2.0, "modes": ("a", ["b", None], {"k": 3})}}
    assert set(ir["gate"].state) == {"offset"}
    assert ir["gate.lin"].type == "linear"  # its children are typed as usual
    assert [ir["pre"].type, ir["post"].type] == ["linear", "sequential"]  # everything around it is traced
    assert ir.root.nodes == ["x", "pre", "gate", "add", "post", "output"]


def test_the_rebuild_runs_the_real_forward_on_both_branches() -> None:
    model, ir = _converted()
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[GATE])
    assert type(rebuilt.gate) is Gate and rebuilt.gate.modes == model.gate.modes
    for x in BRANCHES:
        assert _max_diff(rebuilt(x), model(x)) == 0
    assert "tanh" not in str(rebuilt.code)  # the gate is called, not inlined


def test_train_mode_and_gradients_are_the_originals() -> None:
    model, ir = _converted()
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[GATE])
    model.train()
    rebuilt.train()
    assert rebuilt.gate.training
    for x in BRANCHES:
        model.zero_grad()
        rebuilt.zero_grad()
        model(x).square().sum().backward()
        rebuilt(x).square().sum().backward()
        want = dict(model.named_parameters())
        grads = {name: param.grad for name, param in rebuilt.named_parameters()}
        assert grads.keys() == want.keys()
        assert (grads["gate.lin.weight"] is None) is (x is not X)  # the negative branch does not use it
        for name, grad in grads.items():
            assert (grad is None and want[name].grad is None) or _max_diff(grad, want[name].grad) == 0, name


def test_named_classes_are_opaque_always() -> None:
    model = _model()
    for opaque in ([Gate], [GATE]):
        ir = torch2ir.convert(model, (X,), opaque=opaque)
        assert ir["gate"].type == "opaque"
        assert ir.capture.opaque == [("gate", GATE, "named in opaque=")]


def test_the_loop_closes_and_the_file_round_trips(tmp_path) -> None:
    model, ir = _converted()
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[GATE])
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir
    ir.save(tmp_path / "m.json")
    loaded = IR.load(tmp_path / "m.json")
    assert loaded == ir
    again = ir2torch.convert(tmp_path / "m.json", model.state_dict(), allow=[GATE])
    for x in BRANCHES:
        assert _max_diff(again(x), model(x)) == 0


def test_lowering_is_refused_naming_the_opaque_leaves() -> None:
    _, ir = _converted()
    with pytest.raises(IRError, match=r"opaque leaves \(gate\)"):
        ir.lower()


def test_a_rebuild_refuses_classes_not_allowed() -> None:
    model, ir = _converted()
    with pytest.raises(UnsafeTargetError, match=rf"not allowed: {GATE} \(gate\)") as info:
        ir2torch.convert(ir, model.state_dict())
    assert "allow=" in info.value.hint and "register_opaque" in info.value.hint


def test_a_registered_builder_takes_precedence_and_needs_no_allow() -> None:
    model, ir = _converted()
    converter = ir2torch.get_default_converter()
    built = []

    @converter.register_opaque(GATE)
    def build(impl):
        built.append(impl.name)
        gate = Gate()
        gate.scale = impl.data["attributes"]["scale"]
        return gate

    rebuilt = converter.convert(ir, model.state_dict())
    assert built == ["gate"]
    for x in BRANCHES:
        assert _max_diff(rebuilt(x), model(x)) == 0


class Holder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()
        self.gate.helper = object()  # not a plain value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(x)


def test_an_attribute_the_ir_cannot_record_is_refused_naming_it() -> None:
    with pytest.raises(ConversionError, match=rf"opaque leaf gate \({GATE}\) holds attribute 'helper'") as info:
        torch2ir.convert(Holder(), (X,), opaque="auto")
    assert info.value.key == "helper"


def test_without_opaque_the_refusal_is_unchanged() -> None:
    with pytest.raises(ExportFailedError, match=rf"in gate \({GATE}\)"):
        torch2ir.convert(_model(), (X,))


class Split(nn.Module):
    """Two inputs, a keyword, a tuple out; data-dependent."""

    def forward(self, x: torch.Tensor, y: torch.Tensor, *, flip: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if (x * y).mean() > 0:
            return x + y, (x - y)[:, :2]
        return (y, x[:, :2]) if flip else (x, y[:, :2])


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.split = Split()
        self.lin = nn.Linear(2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(x, x.flip(-1), flip=True)
        c, d = self.split(self.lin(b), a, flip=False)  # called again alike (export preserves one signature)
        return c * 2 + self.lin(d)


def test_several_inputs_tuple_outputs_and_repeated_calls_are_wired() -> None:
    torch.manual_seed(0)
    model = Twice().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert ir["split"].type == "opaque" and ir.capture.opaque[0][:2] == ("split", f"{__name__}.Split")
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Split"])
    for x in (X, -X, torch.randn(2, 4)):
        assert _max_diff(rebuilt(x), model(x)) == 0


def test_auto_on_a_model_export_traces_changes_nothing() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU()).eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert ir == torch2ir.convert(model, (X,)) and ir.capture.opaque == []


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.slope = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.leaky_relu(self.lin(x), self.slope)


class Outer(nn.Module):
    """An opaque module whose children have no handler: never called in a graph, each is traced on its own, on
    the inputs the outer forward called it with."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.blocks = nn.ModuleList([Inner(), nn.Linear(4, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.blocks[1](self.blocks[0](self.inner(x)))
        return self.inner(-x)


class HasOuter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.outer = Outer()
        self.inner = Inner()  # outside the opaque leaf: traced as usual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.outer(x))


def test_children_without_handlers_of_an_opaque_leaf_are_traced_on_their_own() -> None:
    torch.manual_seed(0)
    model = HasOuter().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("outer", f"{__name__}.Outer")]
    assert {k: ir[k].type for k in ("outer", "outer.inner", "outer.blocks", "outer.blocks.0", "outer.blocks.1",
                                    "inner")} == {"outer": "opaque", "outer.inner": "module",
                                                  "outer.blocks": "modulelist", "outer.blocks.0": "module",
                                                  "outer.blocks.1": "linear", "inner": "module"}
    assert ir["outer.inner"].nodes == ir["inner"].nodes  # the same graph, traced alone or in the model's trace
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Outer"])
    assert type(rebuilt.outer) is Outer and type(rebuilt.outer.inner) is not Inner
    for x in BRANCHES:
        assert _max_diff(rebuilt(x), model(x)) == 0
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


def test_strict_export_is_refused_with_opaque_leaves() -> None:
    with pytest.raises(ConversionError, match="non-strict export"):
        torch2ir.convert(_model(), (X,), opaque=[Gate], strict=True)


class TwoKinds(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()
        self.split = Split()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.split(self.gate(x), x)
        return a.sum(-1, keepdim=True) * b


def test_auto_adds_each_failing_class_in_turn() -> None:
    torch.manual_seed(0)
    model = TwoKinds().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("gate", GATE), ("split", f"{__name__}.Split")]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[GATE, f"{__name__}.Split"])
    for x in (X, -X, torch.randn(2, 4)):
        assert _max_diff(rebuilt(x), model(x)) == 0


class Router(nn.Module):
    """Moves its typed child to another dtype inside forward (Switch Transformers' router): the export fails in
    nn.Linear's own code, but the failure is the router's."""

    def __init__(self) -> None:
        super().__init__()
        self.classifier = nn.Linear(4, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier = self.classifier.to(torch.float64)
        return self.classifier(x.double()).float()


class Routed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = Router()
        self.out = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.router(x))


def test_a_typed_leaf_is_never_made_opaque_its_caller_is() -> None:
    torch.manual_seed(0)
    model = Routed().eval()
    with pytest.raises(ExportFailedError, match=r"router.classifier \(torch.nn.modules.linear.Linear\)"):
        torch2ir.convert(model, (X,))
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("router", f"{__name__}.Router")]
    assert "its use of router.classifier (Linear) fails to trace" in ir.capture.opaque[0][2]
    assert ir["router.classifier"].type == "linear" and ir["out"].type == "linear"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Router"])
    for x in BRANCHES:
        assert _max_diff(rebuilt(x), model(x)) == 0
