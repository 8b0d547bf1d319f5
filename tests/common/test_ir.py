import json

import networkx as nx
import pytest
import torch

from common import IR, Implementation, Ref
from common.errors import DanglingEdgeError, IRError, IRFormatError, MissingImplementationError
from common.serialize import ir_to_document, load_ir
from tests.seed import seed_dict


def test_seed_from_dict_verbatim_and_back():
    ir = IR.from_dict(seed_dict())
    assert list(ir) == ["root", "0"]
    assert ir["0"].data == {"in_features": 1, "out_features": 2, "bias": True}
    assert ir["0"].type == "custom_linear"
    assert ir.root.nodes == ["input_1", "_0", "output"]
    assert isinstance(ir.root.graph, nx.MultiDiGraph)
    assert ir.to_dict() == seed_dict()


def test_seed_validates_saves_and_loads_equal_through_real_json(tmp_path):
    ir = IR.from_dict(seed_dict()).validate()
    path = ir.save(tmp_path / "seed.ir.json")
    doc = json.loads(path.read_text(encoding="utf-8"))  # real JSON, no custom decoder
    assert doc["format"] == "torch2ir.ir" and doc["format_version"] == 1
    assert doc["implementations"]["0"]["in_features"] == 1
    assert IR.load(path) == ir


def test_x_plus_x_keeps_two_parallel_edges_with_their_slots(tmp_path):
    impl = Implementation("root", "module")
    impl.add_node("x", "input", "input")
    impl.add_node("add", "function", "aten.add.Tensor", args=[Ref("x"), Ref("x")])
    impl.add_node("output", "output", "output")
    impl.add_edge("x", "add", slot=0)
    impl.add_edge("x", "add", slot=1)
    impl.add_edge("add", "output")
    ir = IR([impl]).validate()
    assert ir.root.graph.number_of_edges("x", "add") == 2
    loaded = load_ir(ir.save(tmp_path / "x.json"))
    slots = sorted(d["slot"] for _, _, d in loaded.root.in_edges("add"))
    assert slots == [0, 1]
    assert loaded == ir


def test_slotless_edges_keep_document_order_after_save_and_load(tmp_path):
    # edges a, b, a into one node: a graph groups in-edges by source (a, a, b);
    # the document order must survive as the argument order.
    doc = {
        "root": {
            "type": "module",
            "nodes": {n: {"type": "input", "implementation": "input"} for n in ("a", "b")}
            | {"cat": {"type": "function", "implementation": "aten.add.Tensor"},
               "output": {"type": "output", "implementation": "output"}},
            "edges": [
                {"src": "a", "dst": "cat"}, {"src": "b", "dst": "cat"}, {"src": "a", "dst": "cat"},
                {"src": "cat", "dst": "output"},
            ],
        }
    }
    ir = IR.from_dict(doc).validate()
    by_slot = sorted((d["slot"], u) for u, _, d in ir.root.in_edges("cat"))
    assert by_slot == [(0, "a"), (1, "b"), (2, "a")]
    assert load_ir(ir.save(tmp_path / "order.json")) == ir


def test_mapping_api_and_missing_key_error():
    ir = IR.from_dict(seed_dict())
    assert "0" in ir and "nope" not in ir and 3 not in ir
    with pytest.raises(MissingImplementationError, match="nearest keys: root") as info:
        ir["roott"]
    assert isinstance(info.value, KeyError)  # still a KeyError for Mapping users
    del ir["0"]
    assert list(ir) == ["root"]
    with pytest.raises(IRFormatError, match="stored under key"):
        ir["x"] = Implementation("y", "module")


def test_add_edge_to_missing_node_is_refused():
    impl = Implementation("root", "module")
    impl.add_node("x", "input")
    with pytest.raises(DanglingEdgeError, match="missing node 'y'"):
        impl.add_edge("x", "y")


def test_tensor_attribute_is_never_inlined(tmp_path):
    ir = IR.from_dict(seed_dict())
    ir["0"].data["weight"] = torch.zeros(2, 1)
    target = tmp_path / "t.json"
    with pytest.raises(IRError, match="cannot be stored inline"):
        ir.save(target)
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_rich_values_round_trip(tmp_path):
    ir = IR.from_dict(seed_dict())
    ir["0"].data.update(kernel=(3, 3), dtype=torch.bfloat16, eps=float("inf"), pad=slice(1, None, 2),
                        table={1: "a"}, odd={"$tuple": 1}, where=torch.device("meta"))
    ir["0"].state["weight"] = {"kind": "parameter", "shape": [2, 1], "dtype": torch.float32, "requires_grad": True}
    doc = ir_to_document(ir)
    assert doc["implementations"]["0"]["kernel"] == {"$tuple": [3, 3]}
    assert doc["implementations"]["0"]["dtype"] == {"$dtype": "bfloat16"}
    loaded = load_ir(ir.save(tmp_path / "rich.json"))
    assert loaded == ir
    assert loaded["0"].data["kernel"] == (3, 3) and loaded["0"].data["odd"] == {"$tuple": 1}
