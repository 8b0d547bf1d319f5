"""Hostile values in the torchao fields (issue 51 point 2): every field of a ``.safetensors`` file's
``torch2ir.subclasses`` record (class, inner tensors, each attribute of each carried class, the inner tensors'
dtypes, shapes and values) and the ``subclass`` of an IR's state record (a carried class, on a linear leaf's weight
only). A bad value is a ``StateDictError`` (the weights file) or an ``IRFormatError`` / ``IRValidationError`` (the
IR) naming it; nothing is imported, no tensor is made."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from torch import nn

import torch2ir
from common.errors import IRFormatError, IRValidationError, StateDictError
from common.state_dict import load_safetensors, save_safetensors
from common.tensor_files import write_tensors_atomic
from common.torchao_tensors import SUBCLASS_KEY
from tests.security.refusals import NEVER, refused

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torchao.quantization as tq  # torchao warns about its CUDA extensions at import

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
X = torch.randn(2, 64)


def _model() -> nn.Module:
    """Three linear layers, one per carried class: Int8Tensor (dynamic activations), Float8Tensor, and
    IntxUnpackedToInt8Tensor (int4 groups)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(64, 64)).eval()
    tq.quantize_(model, tq.Int8DynamicActivationInt8WeightConfig(), filter_fn=lambda m, fqn: fqn == "0")
    tq.quantize_(model, tq.Float8WeightOnlyConfig(), filter_fn=lambda m, fqn: fqn == "1")
    tq.quantize_(model, tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=tq.PerGroup(32)),
                 filter_fn=lambda m, fqn: fqn == "2")
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor], dict[str, Any]]:
    """The IR and weights of :func:`_model`, and the weights file's plain tensors and records."""
    folder = tmp_path_factory.mktemp("torchao")
    model = _model()
    assert [type(m.weight).__name__ for m in model] == ["Int8Tensor", "Float8Tensor", "IntxUnpackedToInt8Tensor"]
    torch2ir.convert(model, (X,)).save(folder / "m.ir.json")
    save_safetensors(model.state_dict(), folder / "m.safetensors")
    with safe_open(str(folder / "m.safetensors"), framework="pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
        records = json.loads(fh.metadata()[SUBCLASS_KEY])
    return folder, tensors, records


def _attrs(key: str) -> Callable[[dict, dict], Any]:
    return lambda r, t: r[key]["attributes"]


Mutation = Callable[[dict[str, Any], dict[str, torch.Tensor]], Any]
#: name -> (mutation of the records and tensors, what the StateDictError says)
HOSTILE: dict[str, tuple[Mutation, str]] = {
    # the record
    "class_as_import_path": (lambda r, t: r["0.weight"].update({"class": f"{NEVER}.Tensor"}), "names class"),
    "class_not_a_string": (lambda r, t: r["0.weight"].update({"class": ["Int8Tensor"]}), "names class"),
    "class_of_torchao_not_carried": (lambda r, t: r["0.weight"].update(
        {"class": "torchao.quantization.Int4Tensor"}), "names class"),
    "class_of_another_record": (lambda r, t: r["0.weight"].update({"class": "torchao.quantization.Float8Tensor"}),
                                "has inner tensors"),
    "extra_field": (lambda r, t: r["0.weight"].update({"eval": "1"}), "has fields"),
    "no_attributes": (lambda r, t: r["0.weight"].pop("attributes"), "has fields"),
    "tensors_not_a_list": (lambda r, t: r["0.weight"].update({"tensors": "qdata"}), "inner tensors"),
    "tensors_without_scale": (lambda r, t: r["0.weight"].update({"tensors": ["qdata"]}), "has no qdata and scale"),
    "tensors_unknown_name": (lambda r, t: (r["0.weight"]["tensors"].append("__class__"),
                                           t.update({"0.weight:__class__": torch.zeros(1)})), "inner tensors"),
    "tensors_twice": (lambda r, t: r["0.weight"]["tensors"].append("scale"), "inner tensors"),
    "tensor_not_stored": (lambda r, t: t.pop("0.weight:scale"), "stores no"),
    "record_of_a_stored_key": (lambda r, t: t.update({"0.weight": torch.zeros(64, 64)}), "names a stored tensor"),
    "table_not_an_object": (lambda r, t: r.update({"0.weight": 3}), "malformed"),
    # Int8Tensor's attributes
    "block_size_zero": (lambda r, t: _attrs("0.weight")(r, t).update({"block_size": [0, 64]}), "block_size"),
    "block_size_not_dividing": (lambda r, t: _attrs("0.weight")(r, t).update({"block_size": [5, 64]}),
                                "block size"),
    "block_size_rank": (lambda r, t: _attrs("0.weight")(r, t).update({"block_size": [64]}), "block size"),
    "block_size_bool": (lambda r, t: _attrs("0.weight")(r, t).update({"block_size": [True, 64]}), "block_size"),
    "block_size_long": (lambda r, t: _attrs("0.weight")(r, t).update({"block_size": [1] * 10**4}), "block_size"),
    "dtype_unknown": (lambda r, t: _attrs("0.weight")(r, t).update({"dtype": "float64"}), "attribute dtype"),
    "dtype_path": (lambda r, t: _attrs("0.weight")(r, t).update({"dtype": "torch.float32"}), "attribute dtype"),
    "reduce_range_not_bool": (lambda r, t: _attrs("0.weight")(r, t).update({"reduce_range": 0}), "reduce_range"),
    "attribute_extra": (lambda r, t: _attrs("0.weight")(r, t).update({"__dict__": {}}), "has attributes"),
    "attribute_missing": (lambda r, t: _attrs("0.weight")(r, t).pop("reduce_range"), "has attributes"),
    "act_granularity_unknown": (lambda r, t: _attrs("0.weight")(r, t)["act_quant_kwargs"].update(
        {"granularity": {"kind": "PerBlock"}}), "act_quant_kwargs"),
    "act_granularity_dim": (lambda r, t: _attrs("0.weight")(r, t)["act_quant_kwargs"]["granularity"].update(
        {"dim": 10**9}), "act_quant_kwargs"),
    "act_mapping_unknown": (lambda r, t: _attrs("0.weight")(r, t)["act_quant_kwargs"].update(
        {"mapping_type": "__class__"}), "act_quant_kwargs"),
    "act_reduce_range": (lambda r, t: _attrs("0.weight")(r, t)["act_quant_kwargs"].update({"reduce_range": "no"}),
                         "act_quant_kwargs"),
    "act_extra": (lambda r, t: _attrs("0.weight")(r, t)["act_quant_kwargs"].update({"eps": 1.0}), "act_quant_kwargs"),
    "act_not_an_object": (lambda r, t: _attrs("0.weight")(r, t).update({"act_quant_kwargs": "per_row"}),
                          "act_quant_kwargs"),
    # Float8Tensor's attributes
    "mm_config_not_bool": (lambda r, t: _attrs("1.weight")(r, t).update(
        {"mm_config": {"emulate": 1, "use_fast_accum": True, "pad_inner_dim": False}}), "mm_config"),
    "mm_config_field_missing": (lambda r, t: _attrs("1.weight")(r, t).update({"mm_config": {"emulate": True}}),
                                "mm_config"),
    "kernel_preference_unknown": (lambda r, t: _attrs("1.weight")(r, t).update({"kernel_preference": "cuda"}),
                                  "kernel_preference"),
    "float8_act_quant_kwargs": (lambda r, t: _attrs("1.weight")(r, t).update({"act_quant_kwargs": {
        "granularity": {"kind": "PerTensor"}, "mapping_type": "SYMMETRIC", "reduce_range": False}}),
                                "act_quant_kwargs"),
    "float8_block_size": (lambda r, t: _attrs("1.weight")(r, t).update({"block_size": [1, 7]}), "block size"),
    # IntxUnpackedToInt8Tensor's attributes
    "target_dtype_unknown": (lambda r, t: _attrs("2.weight")(r, t).update({"target_dtype": "int9"}), "target_dtype"),
    "target_dtype_float": (lambda r, t: _attrs("2.weight")(r, t).update({"target_dtype": "float32"}),
                           "target_dtype"),
    "activation_quantization_unknown": (lambda r, t: _attrs("2.weight")(r, t).update(
        {"activation_quantization": "int4_sym"}), "activation_quantization"),
    # the inner tensors
    "qdata_float": (lambda r, t: t.update({"0.weight:qdata": torch.zeros(64, 64)}), "qdata of torch.float32"),
    "qdata_3d": (lambda r, t: t.update({"0.weight:qdata": torch.zeros(1, 64, 64, dtype=torch.int8)}),
                 "3 dimensions"),
    "float8_qdata_int8": (lambda r, t: t.update({"1.weight:qdata": torch.zeros(64, 64, dtype=torch.int8)}),
                          "qdata of torch.int8"),
    "scale_shape": (lambda r, t: t.update({"0.weight:scale": torch.ones(1, 1)}), "scale of shape"),
    "scale_negative": (lambda r, t: t["0.weight:scale"].neg_(), "scale of shape"),
    "scale_nan": (lambda r, t: t["1.weight:scale"].fill_(float("nan")), "scale of shape"),
    "scale_integer": (lambda r, t: t.update({"2.weight:scale": torch.ones(64, 2, dtype=torch.int32)}),
                      "scale of shape"),
    "zero_point_shape": (lambda r, t: t.update({"0.weight:zero_point": torch.zeros(64, dtype=torch.int8)}),
                         "zero point"),
    "zero_point_dtype": (lambda r, t: t.update({"2.weight:zero_point": torch.zeros(64, 2, dtype=torch.int64)}),
                        "zero point"),
    "intx_qdata_out_of_range": (lambda r, t: t["2.weight:qdata"].fill_(100), r"outside \[-8, 7\]"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_torchao_record_is_refused(case, saved, tmp_path):
    folder, tensors, records = saved
    tensors = {k: v.clone() for k, v in tensors.items()}
    records = json.loads(json.dumps(records))
    mutate, match = HOSTILE[case]
    mutate(records, tensors)
    path = tmp_path / "m.safetensors"
    write_tensors_atomic(path, tensors, {"torch2ir.aliases": "{}", SUBCLASS_KEY: json.dumps(records)})
    with pytest.raises(StateDictError, match=match):
        load_safetensors(path)
    error = refused(folder / "m.ir.json", path, allow=[])  # the rebuild refuses it alike, importing nothing
    assert isinstance(error, StateDictError)
    assert NEVER not in sys.modules


@pytest.mark.parametrize("metadata", ["[1]", "not json", "{\"0.weight\": []}", "{\"w\": " + "[" * 5000 + "]" * 5000
                                      + "}"])
def test_a_malformed_torchao_table_is_refused(saved, tmp_path, metadata):
    _, tensors, _ = saved
    path = tmp_path / "m.safetensors"
    write_tensors_atomic(path, tensors, {"torch2ir.aliases": "{}", SUBCLASS_KEY: metadata})
    with pytest.raises(StateDictError, match="malformed torch2ir.subclasses"):
        load_safetensors(path)


def test_the_weights_file_round_trips_before_any_mutation(saved, tmp_path):
    """The hostile cases start from a file that loads: each refusal is the mutation's."""
    folder, tensors, records = saved
    path = tmp_path / "m.safetensors"
    write_tensors_atomic(path, tensors, {"torch2ir.aliases": "{}", SUBCLASS_KEY: json.dumps(records)})
    model = _model()
    loaded = load_safetensors(path)
    for i, module in enumerate(model):
        assert type(loaded[f"{i}.weight"]) is type(module.weight)
    import ir2torch

    assert torch.equal(ir2torch.convert(folder / "m.ir.json", path)(X), model(X))


#: name -> mutation of the IR document's state record of ``0.weight``
IR_HOSTILE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "subclass_as_import_path": lambda rec: rec.update({"subclass": f"{NEVER}.Tensor"}),
    "subclass_not_a_string": lambda rec: rec.update({"subclass": {"$dtype": "int8"}}),
    "subclass_unknown_torchao_class": lambda rec: rec.update({"subclass": "torchao.quantization.Int4Tensor"}),
    "subclass_on_a_buffer": lambda rec: rec.update({"kind": "buffer", "persistent": True}),
}
#: name -> mutation of the whole document: a valid subclass where no torchao weight may be
IR_MISPLACED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "subclass_on_a_bias": lambda doc: doc["implementations"]["0"]["state"]["bias"].update(
        {"subclass": "torchao.quantization.Int8Tensor"}),
    "subclass_on_a_graph_module": lambda doc: doc["implementations"]["0"].update({"type": "module"}),
}


@pytest.mark.parametrize("case", IR_HOSTILE)
def test_a_hostile_subclass_of_a_state_record_is_refused(case, saved, tmp_path):
    folder, _, _ = saved
    doc = json.loads((folder / "m.ir.json").read_text())
    rec = doc["implementations"]["0"]["state"]["weight"]
    assert rec["subclass"] == "torchao.quantization.Int8Tensor"
    IR_HOSTILE[case](rec)
    path = tmp_path / "m.ir.json"
    path.write_text(json.dumps(doc))
    error = refused(path, folder / "m.safetensors", allow=[])
    assert isinstance(error, IRFormatError) and "subclass" in str(error)


@pytest.mark.parametrize("case", IR_MISPLACED)
def test_a_subclass_outside_a_linear_weight_is_refused(case, saved, tmp_path):
    folder, _, _ = saved
    doc = json.loads((folder / "m.ir.json").read_text())
    IR_MISPLACED[case](doc)
    path = tmp_path / "m.ir.json"
    path.write_text(json.dumps(doc))
    error = refused(path, folder / "m.safetensors", allow=[])
    assert isinstance(error, IRValidationError) and "only the weight of a 'linear' leaf" in str(error)


_CHILD = """
import json, sys
from common.errors import StateDictError
from common.state_dict import load_safetensors
import ir2torch  # noqa: F401 - the library imported, as a user's process has it
assert not any(m.startswith("torchao") for m in sys.modules), "imported by the library itself"
try:
    load_safetensors(sys.argv[1])
except StateDictError:
    pass
else:
    raise SystemExit("the hostile file loaded")
assert not any(m.startswith("torchao") for m in sys.modules), "imported for a refused record"
weights = load_safetensors(sys.argv[2])
assert type(weights["0.weight"]).__name__ == "Int8Tensor" and "torchao.quantization" in sys.modules
"""


def test_torchao_is_imported_only_for_a_file_whose_records_pass(saved, tmp_path):
    """In a fresh process: neither the library nor a refused record imports torchao; a valid record does."""
    import subprocess

    folder, tensors, records = saved
    hostile = json.loads(json.dumps(records))
    hostile["0.weight"]["attributes"]["dtype"] = "float64"
    write_tensors_atomic(tmp_path / "bad.safetensors", tensors, {"torch2ir.aliases": "{}",
                                                                 SUBCLASS_KEY: json.dumps(hostile)})
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "bad.safetensors"),
                           str(folder / "m.safetensors")], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
