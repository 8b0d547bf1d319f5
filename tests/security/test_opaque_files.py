"""Hostile opaque leaves in a file (type ``"opaque"``, :mod:`common.opaque`): class names and attributes a file
could use to import or run code. Each is refused with an ``IRError``; nothing is imported, built or called."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import ir2torch
from common import IR
from common.errors import IRError
from tests.security.refusals import NEVER, refused
from tests.torch2ir.test_opaque import GATE, X, _converted

#: A standard-library module no test imports (importing it prints the Zen of Python): proof that nothing was.


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[dict, dict]:
    model, ir = _converted()
    path = tmp_path_factory.mktemp("opaque") / "m.json"
    ir.save(path)
    return json.loads(path.read_text()), model.state_dict()


def _write(tmp_path: Path, doc: dict, **gate: object) -> Path:
    doc = json.loads(json.dumps(doc))
    doc["implementations"]["gate"].update(gate)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name", [f"{NEVER}.Zen", "os.system", "builtins.eval", "subprocess.Popen",
                                  "collections.OrderedDict"])
def test_a_class_not_allowed_is_never_imported(tmp_path, saved, name) -> None:
    doc, state = saved
    error = refused(_write(tmp_path, doc, **{"class": name}), state, allow=[])
    assert name in error.message and "allow=" in error.hint


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "subprocess.Popen", "collections.OrderedDict",
                                  "torch.Tensor"])
def test_an_allowed_name_that_is_not_a_module_class_is_never_called(tmp_path, saved, name, monkeypatch) -> None:
    doc, state = saved
    calls = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    error = refused(_write(tmp_path, doc, **{"class": name}), state, allow=[name])
    assert "not an nn.Module subclass" in error.message
    assert not calls


@pytest.mark.parametrize("name", ["os system.Popen", "__import__", "builtins.__import__", "os.__class__.x",
                                  "x", "", "a..b", f"{NEVER}.Zen; import os", "__builtins__.eval", 3, None])
def test_a_class_name_that_is_not_a_dotted_name_is_refused_on_load(tmp_path, saved, name) -> None:
    doc, _ = saved
    path = _write(tmp_path, doc, **{"class": name})
    with pytest.raises(IRError, match="not a dotted Python class name"):
        IR.load(path)
    assert NEVER not in sys.modules


@pytest.mark.parametrize("attributes", [{"__class__": "x"}, {"__dict__": {}}, {"forward": 1}, {"training": True},
                                        {"_parameters": {}}, {"__init__": 0}, {"bad name": 1}])
def test_hostile_attribute_names_are_refused_on_load(tmp_path, saved, attributes) -> None:
    doc, _ = saved
    with pytest.raises(IRError, match="opaque attribute name"):
        IR.load(_write(tmp_path, doc, attributes=attributes))


def test_deeply_nested_values_arerefused(tmp_path, saved) -> None:
    doc, _ = saved
    value: object = 1
    for _ in range(40):
        value = [value]
    with pytest.raises(IRError):
        IR.load(_write(tmp_path, doc, attributes={"deep": value}))


@pytest.mark.parametrize("value", [{"$ref": "x"}, {"$device": "cpu"}, {"$dtype": "os.system"}])
def test_values_that_are_not_plain_arerefused(tmp_path, saved, value) -> None:
    doc, _ = saved
    with pytest.raises(IRError):
        IR.load(_write(tmp_path, doc, attributes={"v": value}))


def test_a_dtype_attribute_is_a_value(tmp_path, saved) -> None:
    """A torch dtype is a plain attribute (transformers' routers keep ``self.dtype``), written as ``$dtype``."""
    doc, _ = saved
    assert IR.load(_write(tmp_path, doc, attributes={"v": {"$dtype": "float16"}}))["gate"].data["attributes"] == \
        {"v": torch.float16}


@pytest.mark.parametrize("name", ["train", "eval", "state_dict", "parameters", "register_buffer", "_apply"])
def test_an_attribute_shadowing_a_class_member_is_refused_when_allowed(tmp_path, saved, name) -> None:
    """A method (or property, or any descriptor) of the class; a plain class constant may be overridden."""
    doc, state = saved
    path = _write(tmp_path, doc, attributes={name: 1})
    with pytest.raises(IRError, match="would shadow|not allowed"):
        ir2torch.convert(path, state, allow=[GATE])


def test_the_untouched_file_rebuilds(tmp_path, saved) -> None:
    doc, state = saved
    model, _ = _converted()
    rebuilt = ir2torch.convert(_write(tmp_path, doc), state, allow=[GATE])
    assert torch.equal(rebuilt(X), model(X))
