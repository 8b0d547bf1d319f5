"""Hostile values in the quantization fields (#15 point 3): ``meta.qconfig``, ``meta.observer_hook`` and the
attributes of observer / fake-quantize implementations are data: a bad one is an IRFormatError naming it,
nothing is imported or run, no module is half-built."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import torch

import ir2torch
import torch2ir
from common import IR
from common.errors import IRFormatError
from tests.quant.eager_models import QCONFIGS, qat_model

X = torch.randn(1, 3, 8, 8)


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("quant") / "q.ir.json"
    torch2ir.convert(qat_model(QCONFIGS["x86_fused"]()), (X,)).save(path)
    doc = json.loads(path.read_text())
    assert "tensors" not in doc  # a JSON file alone: every value of the state comes from a state dict
    return doc


def _activation(doc: dict) -> dict:
    return doc["implementations"]["conv"]["meta"]["qconfig"]["activation"]


HOSTILE: dict[str, Any] = {
    "class_as_import_path": lambda d: _activation(d).update({"class": "os.system"}),
    "class_not_a_string": lambda d: _activation(d).update({"class": ["FakeQuantize"]}),
    "unknown_kwarg": lambda d: _activation(d)["kwargs"].update({"__class__": 1}),
    "kwarg_wrong_type": lambda d: _activation(d)["kwargs"].update({"quant_min": "0; import os"}),
    "bool_for_int": lambda d: _activation(d)["kwargs"].update({"quant_min": True}),
    "unknown_qscheme": lambda d: d["implementations"]["conv"]["meta"]["qconfig"]["weight"]["kwargs"].update(
        {"qscheme": {"qscheme": "torch.per_tensor_affine; x"}}),
    "nested_observer_class": lambda d: _activation(d)["kwargs"].update(
        {"observer": {"class": "subprocess.Popen", "kwargs": {}}}),
    "extra_qconfig_key": lambda d: d["implementations"]["conv"]["meta"]["qconfig"].update({"eval": "1"}),
    "module_device_not_true": lambda d: d["implementations"]["conv"]["meta"]["qconfig"].update(
        {"module_device": "yes"}),
    "qconfig_not_a_dict": lambda d: d["implementations"]["conv"]["meta"].update({"qconfig": "get_default_qconfig"}),
    "qat_without_qconfig": lambda d: d["implementations"]["conv"]["meta"].pop("qconfig"),
    "unknown_hook": lambda d: d["implementations"]["conv"]["meta"].update({"observer_hook": "builtins.exec"}),
    "hook_without_observer": lambda d: d["implementations"]["conv.bn"]["meta"].update({"observer_hook": "forward"}),
    "observer_attribute_unknown": lambda d: d["implementations"]["conv.weight_fake_quant"].update(
        {"forward": 1}),
    "observer_attribute_wrong_type": lambda d: d["implementations"]["conv.weight_fake_quant"].update(
        {"ch_axis": "0"}),
    "observer_dtype_as_string": lambda d: d["implementations"]["conv.weight_fake_quant"].update(
        {"dtype": "torch.qint8"}),
    "qconfig_in_data": lambda d: d["implementations"]["conv"].update({"qconfig": {}}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_quantization_value_is_an_irformaterror(name: str, document: dict, tmp_path) -> None:
    doc = copy.deepcopy(document)
    HOSTILE[name](doc)
    path = tmp_path / "hostile.ir.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IRFormatError) as info:
        ir2torch.convert(IR.load(path))
    assert info.value.implementation or info.value.key
    assert not list(tmp_path.glob("PWNED*"))


def test_the_untouched_document_rebuilds(document: dict, tmp_path) -> None:
    path = tmp_path / "same.ir.json"
    path.write_text(json.dumps(document))
    rebuilt = ir2torch.convert(IR.load(path))
    assert type(rebuilt.conv).__name__ == "ConvBnReLU2d" and rebuilt.conv.qconfig is not None
