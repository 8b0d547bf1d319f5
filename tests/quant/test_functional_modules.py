"""``FloatFunctional`` and ``FXFloatFunctional`` (modules that compute in their methods) are carried as themselves:
each call node names the method it runs, the rebuilt module is of the real class, so that
``torch.ao.quantization.convert`` swaps it for ``QFunctional`` in a rebuilt QAT model exactly as in the original.
A file naming any other method is refused at load, and nothing runs."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao import quantization as tq
from torch.ao.nn.quantized import FloatFunctional, FXFloatFunctional, QFunctional

import ir2torch
import torch2ir
from common import IR, equal
from common.errors import ConversionError, IRError, IRValidationError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

TYPES = {FloatFunctional: "float_functional", FXFloatFunctional: "fx_float_functional"}
#: Each method with the arguments of one call (``a`` and ``b`` stand for the two input tensors).
CALLS = {
    "add": ("a", "b"), "add_scalar": ("a", 1.5), "mul": ("a", "b"), "mul_scalar": ("a", -0.25),
    "cat": (["a", "b"], 1), "add_relu": ("a", "b"), "matmul": ("a", "b"),
}


class OneMethod(nn.Module):
    """``self.f.<method>(...)`` between two linear layers, the method's arguments from :data:`CALLS`."""

    def __init__(self, cls: type[nn.Module], method: str) -> None:
        super().__init__()
        self.method = method
        self.left, self.right, self.f = nn.Linear(4, 4), nn.Linear(4, 4), cls()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = {"a": self.left(x), "b": self.right(x)}
        args = [[values[v] for v in a] if isinstance(a, list) else values.get(a, a) if isinstance(a, str) else a
                for a in CALLS[self.method]]
        return getattr(self.f, self.method)(*args)


@pytest.mark.parametrize("cls", [FloatFunctional, FXFloatFunctional], ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", sorted(CALLS))
def test_every_method_round_trips_as_a_call_of_the_real_class(cls: type[nn.Module], method: str,
                                                                tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, x = OneMethod(cls, method).eval(), torch.randn(4, 4)
    ir = torch2ir.convert(model, (x,))
    calls = [a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "f"]
    assert [(a["type"], a["method"]) for a in calls] == [(TYPES[cls], method)]
    assert "add" not in {a.get("implementation") for _, a in ir.root.graph.nodes(data=True)}  # not inlined
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict())
    assert type(rebuilt.f) is cls
    assert torch.equal(rebuilt(x), model(x))
    assert equal(ir, torch2ir.convert(rebuilt, (x,)))  # the loop is a fixpoint


class Block(nn.Module):
    """What torchvision's quantizable models do: a residual add, a concatenation and a product, each through a
    ``FloatFunctional`` of its own, between a ``QuantStub`` and a ``DeQuantStub``."""

    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU())
        self.skip_add, self.cat, self.scale = FloatFunctional(), FloatFunctional(), FloatFunctional()
        self.skip_add_relu = FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        y = self.skip_add.add(self.conv(x), x)
        y = self.skip_add_relu.add_relu(y, x)
        z = self.cat.cat([y, x], 1)
        return self.dequant(self.scale.mul(z, z))


def _qat_trained() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Block().train()
    torch.ao.quantization.fuse_modules_qat(model, [["conv.0", "conv.1", "conv.2"]], inplace=True)
    model.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(model, inplace=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(4, 3, 8, 8)).square().mean().backward()
        optimizer.step()
    return model.eval(), torch.randn(2, 3, 8, 8)


def test_int8_conversion_of_a_rebuilt_qat_model_equals_the_originals() -> None:
    model, x = _qat_trained()
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
    for name in ("skip_add", "skip_add_relu", "cat", "scale"):  # the observers are the children, with their stats
        assert type(getattr(rebuilt, name)) is FloatFunctional
        observer = getattr(model, name).activation_post_process
        assert type(getattr(rebuilt, name).activation_post_process) is type(observer)
    int8, rebuilt_int8 = tq.convert(copy.deepcopy(model)), tq.convert(copy.deepcopy(rebuilt))
    assert type(rebuilt_int8.skip_add) is QFunctional and type(int8.skip_add) is QFunctional
    assert rebuilt_int8.cat.scale == int8.cat.scale and rebuilt_int8.cat.zero_point == int8.cat.zero_point
    out = rebuilt_int8(x)
    assert torch.equal(out, int8(x)) and out.abs().sum() > 0


def test_a_module_prepared_after_the_rebuild_gets_its_observer() -> None:
    """A float model rebuilt first and prepared after: ``prepare_qat`` gives the rebuilt ``FloatFunctional``s their
    observers, as to the original's."""
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(2, 3, 8, 8)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    for m in (model, rebuilt):
        m.train().qconfig = tq.get_default_qat_qconfig("x86")
        tq.prepare_qat(m, inplace=True)
        m(x)
    assert type(rebuilt.skip_add.activation_post_process) is type(model.skip_add.activation_post_process)
    assert torch.equal(tq.convert(rebuilt.eval())(x), tq.convert(model.eval())(x))


def test_one_module_called_through_two_methods_is_refused_naming_it() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.f = FloatFunctional()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.f.mul(self.f.add(x, x), x)

    with pytest.raises(ConversionError, match=r"(?s)'f'.*FloatFunctional called through add and mul.*own "
                                              r"FloatFunctional"):
        torch2ir.convert(Twice(), (torch.randn(2, 2),))
    assert "add" not in vars(Twice().f)  # nothing left on the instances either way


def test_the_model_is_left_as_it_was() -> None:
    model, x = OneMethod(FloatFunctional, "add"), torch.randn(4, 4)
    before = dict(vars(model.f))
    torch2ir.convert(model, (x,))
    assert vars(model.f) == before


def test_an_override_module_is_called_through_its_forward() -> None:
    class MyAdder(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a - b  # visibly not an addition

    model, x = OneMethod(FloatFunctional, "add").eval(), torch.randn(4, 4)
    converter = ir2torch.get_default_converter().copy()
    converter.register_override("float_functional", lambda impl: MyAdder())
    rebuilt = converter.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert torch.equal(rebuilt(x), model.left(x) - model.right(x))


def _saved(tmp_path: Path) -> tuple[Path, dict]:
    model, x = OneMethod(FloatFunctional, "add").eval(), torch.randn(4, 4)
    path = tmp_path / "m.ir.json"
    torch2ir.convert(model, (x,)).save(path)
    return path, json.loads(path.read_text())


def _call_node(doc: dict) -> dict:
    nodes = doc["implementations"]["root"]["nodes"]
    return next(n for n in (nodes.values() if isinstance(nodes, dict) else nodes) if n.get("implementation") == "f")


HOSTILE = ["__import__('os').system('touch PWNED')", "__class__", "forward", "", 3, None, ["add"], "ADD"]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_method_outside_the_list_is_refused_at_load(tmp_path: Path, value: object, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path, doc = _saved(tmp_path)
    node = _call_node(doc)
    if value is None:
        del node["method"]
    else:
        node["method"] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(IRError, match="method"):
        IR.load(path)
    assert not (tmp_path / "PWNED").exists()


def test_a_method_on_another_call_is_refused(tmp_path: Path) -> None:
    path, doc = _saved(tmp_path)
    nodes = doc["implementations"]["root"]["nodes"]
    left = next(n for n in (nodes.values() if isinstance(nodes, dict) else nodes) if n.get("implementation") == "left")
    left["method"] = "add"
    path.write_text(json.dumps(doc))
    with pytest.raises(IRValidationError, match="names a method"):
        IR.load(path)


def test_an_ir_built_by_hand_with_a_bad_method_is_refused_by_the_rebuild() -> None:
    model, x = OneMethod(FloatFunctional, "add").eval(), torch.randn(4, 4)
    ir = torch2ir.convert(model, (x,))
    node = next(a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "f")
    node["method"] = "__getattribute__"
    with warnings.catch_warnings(), pytest.raises(IRError, match="method"):
        ir2torch.convert(ir)
