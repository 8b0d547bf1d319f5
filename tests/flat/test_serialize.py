"""FlatIR files: identity through JSON, deterministic bytes, tensors beside the JSON, safety, malformed documents."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import textwrap

import pytest
import torch

import ir2torch
import torch2ir
from common import FlatIR
from common.errors import (
    ArgumentMismatchError,
    DanglingEdgeError,
    IRError,
    IRFormatError,
    IRValidationError,
    UnsafeTargetError,
    UnsupportedFormatVersionError,
)
from tests.flat.cases import built, full_state, lowered, meta_model, to_meta
from tests.helpers import max_abs_diff


@pytest.mark.parametrize(("name", "decompose"), [("bert", False), ("llama", True), ("transformer", False)])
def test_save_load_identity_and_same_bytes(tmp_path, name, decompose):
    flat = lowered(name, decompose)
    path = flat.save(tmp_path / "model.flat.json")
    loaded = FlatIR.load(path)
    assert loaded == flat
    assert loaded.to_dict() == flat.to_dict()
    assert loaded.save(tmp_path / "again.flat.json").read_bytes() == path.read_bytes()
    doc = json.loads(path.read_text())
    assert doc["format"] == "torch2ir.flat" and doc["format_version"] == 1
    assert doc["nodes"][0]["op_type"].startswith("aten.")
    assert "tensors" not in doc and not list(tmp_path.glob("*.safetensors"))  # lowered on meta: no tensor values


def test_same_model_gives_the_same_bytes(tmp_path):
    b = built("vit")
    again = torch2ir.lower(meta_model("vit"), to_meta(b.args))
    assert lowered("vit").save(tmp_path / "a.json").read_bytes() == again.save(tmp_path / "b.json").read_bytes()


def test_plain_dict_form_round_trips():
    flat = lowered("gpt2")
    assert FlatIR.from_dict(flat.to_dict()) == flat
    assert FlatIR.from_dict(copy.deepcopy(flat.to_dict())).validate() == flat


def test_tensor_constants_go_to_a_safetensors_file_beside_the_json(tmp_path):
    b = built("param_and_constant")
    flat = torch2ir.lower(meta_model("param_and_constant"), to_meta(b.args))
    path = flat.save(tmp_path / "pc.flat.json")
    (sidecar,) = tmp_path.glob("pc.flat.tensors.*.safetensors")
    digest = hashlib.sha256(sidecar.read_bytes()).hexdigest()
    assert sidecar.name == f"pc.flat.tensors.{digest[:16]}.safetensors"
    assert json.loads(path.read_text())["tensors"] == {"file": sidecar.name, "sha256": digest, "keys": ["scale"]}
    weights = json.loads(path.read_text())["weights"]
    assert all(set(w) <= {"name", "kind", "shape", "dtype", "requires_grad"} for w in weights)  # never values
    loaded = FlatIR.load(path)
    assert loaded == flat and torch.equal(loaded.tensors["scale"], b.model.scale)
    module = ir2torch.convert(path, {"gain": b.model.gain})  # the constant comes from the tensors file
    with torch.no_grad():
        assert max_abs_diff(b.expected, module(*b.args)) == 0.0
    sidecar.unlink()
    with pytest.raises(IRFormatError, match="tensors file .* is missing"):
        FlatIR.load(path)


def test_lowered_real_model_keeps_non_persistent_buffers_so_its_state_dict_suffices(tmp_path):
    b = built("bert")
    flat = torch2ir.lower(b.model, b.args, b.kwargs)
    assert flat.meta["device"] == "cpu"
    assert sorted(flat.tensors) == ["embeddings.position_ids", "embeddings.token_type_ids"]
    path = flat.save(tmp_path / "bert.flat.json")
    module = ir2torch.convert(path, b.model.state_dict())
    with torch.no_grad():
        assert max_abs_diff(b.expected, module(*b.args, **b.kwargs)) == 0.0


def test_ir2torch_convert_tells_the_formats_apart_by_header(tmp_path):
    b = built("bert")
    flat_path = lowered("bert").save(tmp_path / "bert.flat.json")
    ir_path = torch2ir.convert(b.model, b.args, b.kwargs).save(tmp_path / "bert.ir.json")
    flat_module = ir2torch.convert(flat_path, full_state(b.model))
    rebuilt = ir2torch.convert(ir_path, b.model.state_dict())
    assert isinstance(flat_module, torch.fx.GraphModule) and "flat_ir" in flat_module.meta
    assert isinstance(rebuilt.encoder.layer[0].attention.self.query, torch.nn.Linear)
    with torch.no_grad():
        assert max_abs_diff(b.expected, flat_module(*b.args, **b.kwargs)) <= 1e-5


def _doc(tmp_path, name="resnet"):
    path = lowered(name).save(tmp_path / "m.flat.json")
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("op", ["os.system", "builtins.eval", "subprocess.run", "evil_pkg_t2i_flat.boom",
                                "aten.definitely_not_an_op.default", "torch.load"])
def test_op_outside_the_allow_list_is_refused_on_load_and_never_imported(tmp_path, monkeypatch, op):
    marker = tmp_path / "imported.txt"
    (tmp_path / "evil_pkg_t2i_flat.py").write_text(textwrap.dedent(f"""
        open({str(marker)!r}, "w").write("imported")
        def boom(*a):
            open({str(marker)!r}, "w").write("called")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    path, doc = _doc(tmp_path)
    victim = doc["nodes"][3]
    victim["op_type"] = op
    path.write_text(json.dumps(doc))
    before = set(sys.modules)
    with pytest.raises(UnsafeTargetError, match="not on the allow-list") as info:
        FlatIR.load(path)
    assert info.value.node == victim["name"]
    with pytest.raises(UnsafeTargetError):
        ir2torch.convert(path, full_state(built("resnet").model))
    assert not marker.exists()
    assert "evil_pkg_t2i_flat" not in sys.modules
    assert {m for m in set(sys.modules) - before if m.split(".")[0] not in ("common", "ir2torch", "torch2ir")} == set()
    # accepting it explicitly (as a registered executor does) loads the document, still without importing it
    assert FlatIR.load(path, extra_ops=[op]).nodes[3].op_type == op
    assert "evil_pkg_t2i_flat" not in sys.modules


def _set(doc, path, value):
    *head, last = path
    target = doc
    for key in head:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "error", "match"),
    [
        (("nodes",), {"a": 1}, IRFormatError, "expected list"),
        (("nodes", 0, "op_type"), 3, IRFormatError, "op_type must be a string"),
        (("nodes", 0, "args", "stride"), {"$tuple": 3}, IRFormatError, r"\$tuple takes a list"),
        (("nodes", 0, "args", "not_an_argument"), 1, ArgumentMismatchError, "has no argument 'not_an_argument'"),
        (("nodes", 0, "args", "input"), {"$ref": "nowhere"}, DanglingEdgeError, "'nowhere', which is not defined"),
        (("nodes", 0, "args", "input"), {"$ref": "pixel_values", "index": 0}, IRFormatError, "never an index"),
        (("nodes", 0, "inputs", 0, "shape"), [1, 3], ArgumentMismatchError, "'inputs' lists"),
        (("nodes", 0, "outputs", 0, "dtype"), "float33", IRFormatError, "unknown dtype 'float33'"),
        (("nodes", 0, "outputs", 0, "shape"), [-1], IRFormatError, "shape must be a list"),
        (("nodes", 0, "surprise"), 1, IRFormatError, "unknown fields"),
        (("nodes", 0, "name"), _DELETE, IRFormatError, "non-empty name"),
        (("nodes", 1, "name"), "conv2d", IRValidationError, "duplicate node name"),
        (("nodes", 0, "outputs", 0, "name"), "pixel_values", IRValidationError, "defined twice"),
        (("weights", 0, "kind"), "gradient", IRFormatError, "weight kind 'gradient'"),
        (("weight_name_mapping",), {}, IRValidationError, "weight_name_mapping"),
        (("graph_outputs", 0, "name"), "ghost", DanglingEdgeError, "graph output 'ghost'"),
        (("range_constraints",), {"s0": [1]}, IRFormatError, "range of 's0'"),
        (("in_spec",), 5, IRFormatError, "pytree spec string"),
        (("extra",), 1, IRFormatError, "unknown fields"),
        (("format_version",), 2, UnsupportedFormatVersionError, "reads up to 1"),
        (("format_version",), "1", IRFormatError, "invalid format_version"),
        (("format",), "torch2ir.ir", IRFormatError, "expected 'torch2ir.flat'"),
    ],
)
def test_malformed_documents_raise_ir_errors(tmp_path, path, value, error, match):
    file, doc = _doc(tmp_path)
    assert doc["nodes"][0]["name"] == "conv2d"
    _set(doc, path, value)
    file.write_text(json.dumps(doc))
    with pytest.raises(error, match=match):
        FlatIR.load(file)


@pytest.mark.parametrize("text", ["[1, 2]", '{"format": "torch2ir.flat", "format_version": 1, "nodes": [], '
                                  '"nodes": []}', '{"format": "torch2ir.flat", "format_version": 1, "x": NaN}'])
def test_not_a_flat_document(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(IRFormatError):
        FlatIR.load(path)
    with pytest.raises(IRError):
        ir2torch.convert(path)
