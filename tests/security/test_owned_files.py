"""Hostile injector records and owned modules in a file (brevitas layers kept as opaque leaves that own their
subtree: :mod:`common.injectors`, ``"owns"``, type ``"owned"``). Each planted value is refused with an ``IRError``;
nothing the file names is imported, and nothing is built or called."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import ir2torch
from common import IR
from common.errors import IRError
from common.opaque import named_classes
from tests.security.refusals import NEVER, refused
from tests.torch2ir.test_opaque_brevitas import _convert, _model

#: A standard-library module no test imports (importing it prints the Zen of Python): proof that nothing was.


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[dict, dict, list[str], Path]:
    model = _model()
    ir = _convert(model)
    path = tmp_path_factory.mktemp("owned") / "m.json"
    ir.save(path)
    return json.loads(path.read_text()), model.state_dict(), named_classes(ir.values()), path.parent


def _planted(tmp_path: Path, saved: tuple, change: Any) -> Path:
    doc = json.loads(json.dumps(saved[0]))
    change(doc["implementations"])
    for tensors in saved[3].glob("*.safetensors"):  # the values file beside the JSON, unchanged
        shutil.copy(tensors, tmp_path / tensors.name)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    return path


def _tag(key: str, value: Any) -> dict:
    """A tagged value as a file writes it (a mapping whose key starts with "$" is escaped by common.values)."""
    return {"$dict": [[key, value]]}


def _weight(impls: dict) -> dict:
    return impls["conv"]["init"]["weight_quant"]["$dict"][0][1]


HOSTILE = {
    "injector class not a dotted name": lambda i: _weight(i).update({"class": "os system"}),
    "injector class of another module": lambda i: _weight(i).update({"class": f"{NEVER}.Zen"}),
    "injector without let": lambda i: _weight(i).pop("let"),
    "injector with extra field": lambda i: _weight(i).update({"code": "print(1)"}),
    "let name dunder": lambda i: _weight(i)["let"].update({"__class__": 1}),
    "let name not an identifier": lambda i: _weight(i)["let"].update({"a b": 1}),
    "let class not a dotted name": lambda i: _weight(i)["let"].update({"tensor_quant": _tag("$class", "os;system")}),
    "let class of another module": lambda i: _weight(i)["let"].update({"tensor_quant": _tag("$class", f"{NEVER}.Zen")}),
    "let enum of another module": lambda i: _weight(i)["let"].update(
        {"scaling_impl_type": _tag("$enum", {"class": f"{NEVER}.Zen", "member": "X"})}),
    "let enum member not an identifier": lambda i: _weight(i)["let"].update(
        {"scaling_impl_type": _tag("$enum", {"class": "enum.Enum", "member": "__class__"})}),
    "let dict with a dollar key": lambda i: _weight(i)["let"].update({"x": _tag("$eval", "1")}),
    "let value not plain": lambda i: _weight(i)["let"].update({"x": {"a": {"b": [{"$dtype": 1}]}}}),
    "injectors nested too deep": lambda i: _weight(i)["let"].update({"inner": _nested(12)}),
    "too many lets": lambda i: _weight(i)["let"].update({f"x{n}": n for n in range(300)}),
    "owns not true": lambda i: i["conv"].update({"owns": "yes"}),
    "owns without init": lambda i: (i["conv"].pop("init"), i["conv"].update({"owns": True})),
    "owned without an owner": lambda i: i["conv"].pop("owns"),
    "owned class not a dotted name": lambda i: i["conv.input_quant"].update({"class": "a b"}),
    "owned class of another library": lambda i: i["conv.input_quant"].update({"class": f"{NEVER}.Zen"}),
    "owned attribute dunder": lambda i: i["conv.input_quant"]["attributes"].update({"__dict__": {}}),
    "owned attribute shadowing a method": lambda i: i["conv.input_quant"]["attributes"].update(
        {"forward": 1}),
    "owned attribute shadowing a property": lambda i: i["conv.input_quant"]["attributes"].update(
        {"is_narrow_range": 1}),
    "owned attribute not plain": lambda i: i["conv.input_quant"]["attributes"].update(
        {"x": {"$tensor": 1}}),
    "owned with extra field": lambda i: i["conv.input_quant"].update({"init": {}}),
    "owned at the root": lambda i: i["root"].update({"type": "owned", "class": "a.B", "attributes": {}}),
}


def _nested(depth: int) -> dict:
    value: dict = _tag("$injector", {"class": "brevitas.quant.scaled_int.Int8WeightPerTensorFloat", "let": {}})
    for _ in range(depth):
        value = _tag("$injector", {"class": "brevitas.quant.scaled_int.Int8WeightPerTensorFloat", "let": {"x": value}})
    return value


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_value_is_refused_and_nothing_runs(tmp_path, saved, name, monkeypatch) -> None:
    _, state, allow, _ = saved
    calls: list[Any] = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    refused(_planted(tmp_path, saved, HOSTILE[name]), state, allow)
    assert not calls


def test_the_file_as_saved_rebuilds(tmp_path, saved) -> None:
    _, state, allow, _ = saved  # the planted files differ from this one by their hostile value only
    model = ir2torch.convert(_planted(tmp_path, saved, lambda i: None), state, allow=allow)
    assert type(model.conv).__name__ == "QuantConv2d"


def test_an_injector_class_is_never_imported_unless_allowed(tmp_path, saved) -> None:
    _, state, allow, _ = saved
    path = _planted(tmp_path, saved, lambda i: _weight(i).update({"class": f"{NEVER}.Zen"}))
    error = refused(path, state, [a for a in allow if "SixBit" not in a])
    assert f"{NEVER}.Zen" in error.message and "allow=" in error.hint


def test_loading_checks_the_records_before_anything_is_built(tmp_path, saved) -> None:
    with pytest.raises(IRError, match="dotted Python class name"):
        IR.load(_planted(tmp_path, saved, lambda i: _weight(i).update({"class": "os system"})))
    with pytest.raises(IRError, match="no opaque leaf above it"):
        IR.load(_planted(tmp_path, saved, lambda i: i["conv"].pop("owns")))
