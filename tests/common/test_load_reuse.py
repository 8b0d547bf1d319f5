"""Loading reads the JSON once: the cleanup after a load uses the document it read while the file is the same file
(else reads it again), duplicate keys are still refused with the first one named, and decoding keeps every value."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from common import IR, Implementation, Ref, json_files, tensor_files
from common.errors import IRFormatError
from common.values import MAX_DEPTH, TRAINING, decode, encode


def _ir_with_tensor() -> IR:
    ir = IR([Implementation("root", "module")])
    root = ir.root
    root.add_node("x", "input")
    root.add_node("c", "get_attr", "const")
    root.add_node("add", "function", "aten.add.Tensor", args=[Ref("x"), Ref("c")], kwargs={})
    root.add_edge("x", "add", slot=0)
    root.add_edge("c", "add", slot=1)
    root.add_node("output", "output", args=[Ref("add")], kwargs={})
    root.add_edge("add", "output", slot=0)
    root.state["const"] = {"kind": "constant", "shape": [2], "dtype": torch.float32}
    ir.tensors["const"] = torch.tensor([1.0, 2.0])
    return ir


def _stale(path: Path) -> Path:
    """A tensors file and the lock file a save killed midway leaves (a completed save leaves no lock file)."""
    stale = path.with_name(path.name.removesuffix(".json") + ".tensors.0123456789abcdef.safetensors")
    stale.write_bytes(b"left by an interrupted save")
    path.with_name(f".{path.name}.lock").write_bytes(b"")
    return stale


def test_load_cleans_with_the_document_it_read(tmp_path, monkeypatch):
    path = _ir_with_tensor().save(tmp_path / "m.ir.json")
    stale = _stale(path)
    reads = []
    real = tensor_files.read_text
    monkeypatch.setattr(tensor_files, "read_text", lambda p: reads.append(p) or real(p))
    loaded = IR.load(path)
    assert len(reads) == 1  # the cleanup did not read the JSON again
    assert not stale.exists()
    kept = json.loads(path.read_text())["tensors"]["file"]
    assert (tmp_path / kept).exists()
    assert torch.equal(loaded.tensors["const"], torch.tensor([1.0, 2.0]))


def test_cleanup_reads_again_when_the_file_changed(tmp_path):
    path = _ir_with_tensor().save(tmp_path / "m.ir.json")
    doc = json.loads(path.read_text())
    kept = doc["tensors"]["file"]
    lying = dict(doc, tensors=dict(doc["tensors"], file="m.ir.tensors.fedcba9876543210.safetensors"))
    stale = _stale(path)
    # an identity that is not the file's: the document given is not trusted, the one on disk decides
    removed = tensor_files.clean_after_load(path, read=((0, 0, 0, 0, 0), lying))
    assert stale.name in removed
    assert kept not in removed and (tmp_path / kept).exists()
    # the file's own identity: the document given is the one on disk
    stale = _stale(path)
    removed = tensor_files.clean_after_load(path, read=(tensor_files._identity(path), doc))
    assert removed == [stale.name]
    assert (tmp_path / kept).exists()


@pytest.mark.parametrize(("text", "key"), [
    ('{"a": 1, "b": 2, "a": 3}', "a"),
    ('{"x": {"k": 1, "j": 2, "j": 3, "k": 4}}', "j"),
])
def test_duplicate_keys_refused_naming_the_first(text, key):
    with pytest.raises(IRFormatError, match=f"duplicate key '{key}'"):
        json_files.loads_json(text)


@pytest.mark.parametrize("value", [
    [1, "s", None, True, 2.5, [3, [4, {"k": "v"}]]],
    {"a": 1, "b": [None, False], "c": {"d": "e"}},
    (1, Ref("n", 0), torch.float16, slice(1, None, 2), math.inf, TRAINING, torch.Size([2, 3]), ...),
    {"nested": {"deeper": [[1, 2], (3,)]}},
])
def test_decode_round_trips(value):
    encoded = encode(value)
    back = decode(json.loads(json.dumps(encoded)))
    assert back == value
    assert type(back) is type(value)


def test_depth_limit_holds_for_plain_leaves():
    ok: object = 1
    for _ in range(MAX_DEPTH):
        ok = [ok]
    assert decode(ok) == ok  # MAX_DEPTH levels of lists around an integer: accepted
    with pytest.raises(IRFormatError, match="nested more than"):
        decode([ok])  # one more level: the integer is deeper than the limit, as before
    with pytest.raises(IRFormatError, match="nested more than"):
        decode({"k": ok})


def test_depth_limit_holds_inside_tuples():
    ok: object = 1
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    doc = {"$tuple": [ok]}  # the tuple is one level: MAX_DEPTH levels around the integer in all
    assert decode(doc) == (ok,)
    with pytest.raises(IRFormatError, match="nested more than"):
        decode({"$tuple": [[ok]]})
    with pytest.raises(IRFormatError, match="nested more than"):
        decode([{"$tuple": [ok]}])
