"""Shared bodies: alike module instances stored once (format 2), loaded unexpanded, and exactly the same IR."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import (
    CycleError,
    IRFormatError,
    IRSerializationError,
    MissingImplementationError,
    NodeTypeMismatchError,
)
from common.values import encode


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.fc2(torch.relu(self.fc1(x))))


class Tower(nn.Module):
    """Four alike blocks, a head unlike them, and a block registered twice (an alias)."""

    def __init__(self, dim: int = 8, depth: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _tower() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return Tower().eval(), (torch.randn(2, 8),)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, tuple[torch.Tensor], IR, Path]:
    model, args = _tower()
    ir = torch2ir.convert(model, args)
    path = ir.save(tmp_path_factory.mktemp("bodies") / "tower.ir.json")
    return model, args, ir, path


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def test_alike_instances_are_stored_once(saved):
    _, _, ir, path = saved
    doc = _doc(path)
    assert doc["format_version"] == 2
    # the blocks, their two Linear kinds and their norms: four bodies; the head (3 outputs) is unlike fc2
    assert sorted(doc["bodies"]) == ["blocks.0", "blocks.0.fc1", "blocks.0.fc2", "blocks.0.norm"]
    assert doc["implementations"]["blocks.3"] == {"name": "blocks.3", "$body": "blocks.0",
                                                  "meta": {"source": "blocks.3"}}
    assert "nodes" in doc["implementations"]["head"] and "$body" not in doc["implementations"]["head"]
    assert ir.shared_bodies()["blocks.0"] == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    full = json.dumps({"format": "torch2ir.ir", "format_version": 1,
                       "implementations": ir.to_dict(value_fn=encode, edge_list=True)}, indent=1)
    assert len(path.read_text()) < 0.6 * len(full)


def test_a_loaded_instance_stays_unexpanded_until_its_graph_is_read(saved):
    path = saved[3]
    loaded = IR.load(path)
    assert [k for k in loaded if loaded[k].body == "blocks.0"] == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    block = loaded["blocks.2"]
    assert block.variant_count == 0 and block.body == "blocks.0"
    calls = sorted(a["implementation"] for _, a in block.graph.nodes(data=True) if a["type"] not in
                   ("input", "output", "function", "get_attr"))
    assert calls == ["blocks.2.fc1", "blocks.2.fc2", "blocks.2.norm"]  # relocated from blocks.0
    assert block.body is None and loaded["blocks.3"].body == "blocks.0"
    assert loaded["blocks.0"].graph is not loaded["blocks.1"].graph


def test_loaded_equals_converted_and_saves_to_the_same_bytes(saved, tmp_path):
    _, _, ir, path = saved
    loaded = IR.load(path)
    assert loaded == ir
    again = IR.load(path).save(tmp_path / "tower.ir.json")
    assert again.read_text() == path.read_text()


def test_an_instance_changed_after_load_is_its_own_and_the_rest_still_share(saved, tmp_path):
    model, args, _, path = saved
    loaded = IR.load(path)
    graph = loaded["blocks.1"].graph
    node = next(n for n, a in graph.nodes(data=True) if a.get("implementation") == "aten.relu.default")
    loaded["blocks.1"].graph.nodes[node]["implementation"] = "aten.sigmoid.default"
    doc = _doc(loaded.save(tmp_path / "changed.ir.json"))
    assert "$body" not in doc["implementations"]["blocks.1"]
    assert doc["implementations"]["blocks.2"]["$body"] == "blocks.0"
    rebuilt = ir2torch.convert(IR.load(tmp_path / "changed.ir.json"), model.state_dict())
    expected = model.blocks[0](args[0])
    expected = model.blocks[1].norm(expected + model.blocks[1].fc2(torch.sigmoid(model.blocks[1].fc1(expected))))
    for block in model.blocks[2:]:
        expected = block(expected)
    assert torch.equal(rebuilt(*args), model.head(expected))


def test_rebuild_of_a_loaded_file_is_exact(saved):
    model, args, _, path = saved
    rebuilt = ir2torch.convert(IR.load(path), model.state_dict())
    assert torch.equal(rebuilt(*args), model(*args))
    assert [n for n, _ in rebuilt.named_modules()] == [n for n, _ in model.named_modules()]


def test_format_1_files_still_load(saved, tmp_path):
    _, _, ir, _ = saved
    path = tmp_path / "v1.ir.json"
    path.write_text(json.dumps({"format": "torch2ir.ir", "format_version": 1,
                                "implementations": ir.to_dict(value_fn=encode, edge_list=True)}))
    loaded = IR.load(path)
    assert loaded == ir and all(impl.body is None for impl in loaded.values())


def test_a_transformers_decoder_shares_its_layers(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                         use_cache=False)).eval()
    x = torch.randint(0, 100, (1, 8))
    ir = torch2ir.convert(model, (x,))
    doc = _doc(ir.save(tmp_path / "llama.ir.json"))
    assert "model.layers.0" in doc["bodies"] and doc["implementations"]["model.layers.2"]["$body"] == "model.layers.0"
    loaded = IR.load(tmp_path / "llama.ir.json")
    assert loaded["model.layers.2.self_attn"].body == "model.layers.0.self_attn"
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    assert torch.equal(rebuilt(x).logits, model(x).logits)


# -- hostile documents ----------------------------------------------------------------------------------------
def _hostile(saved: Any, tmp_path: Path, change: Any) -> Path:
    doc = copy.deepcopy(_doc(saved[3]))
    change(doc)
    path = tmp_path / "hostile.ir.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _set(doc: dict[str, Any], key: str, **fields: Any) -> None:
    doc["implementations"][key].update(fields)


def _call_from_body(doc: dict[str, Any], old: str, new: str) -> None:
    node = next(n for n in doc["bodies"]["blocks.0"]["nodes"].values() if n.get("implementation") == old)
    node.update(implementation=new, type="module")


HOSTILE = {
    "unknown body": (lambda d: _set(d, "blocks.2", **{"$body": "nowhere"}), IRFormatError, "names no entry"),
    "body not a string": (lambda d: _set(d, "blocks.2", **{"$body": ["blocks.0"]}), IRFormatError, "names no entry"),
    "instance with a graph": (lambda d: _set(d, "blocks.2", nodes={}), IRFormatError, r"has fields \['nodes'\]"),
    "instance with a type": (lambda d: _set(d, "blocks.2", type="linear"), IRFormatError, r"has fields \['type'\]"),
    "instance with state": (lambda d: _set(d, "blocks.2", state={}), IRFormatError, r"has fields \['state'\]"),
    "unused body": (lambda d: d["bodies"].update(spare=d["bodies"]["blocks.0"]), IRFormatError, "used by no"),
    "home not an instance": (lambda d: d["implementations"]["blocks.0"].pop("$body"), IRFormatError,
                             "not an instance of itself"),
    "body naming a body": (lambda d: d["bodies"]["blocks.0"].update({"$body": "blocks.0"}), IRFormatError,
                           "belong to instances"),
    "body with aliases": (lambda d: d["bodies"]["blocks.0"].update(aliases=["x"]), IRFormatError,
                          "belong to instances"),
    "bodies in a version 1 file": (lambda d: d.update(format_version=1), IRFormatError, "need format_version 2"),
    "bodies not an object": (lambda d: d.update(bodies=[1]), IRFormatError, "bodies"),
    "instance name differs": (lambda d: _set(d, "blocks.2", name="blocks.1"), IRFormatError, "differs from its key"),
    "instance meta not an object": (lambda d: _set(d, "blocks.2", meta=[1]), IRFormatError, "meta"),
    # a body used where its children are not: the instance's relocated calls name modules that are missing...
    "instance without the children": (lambda d: [d["implementations"].pop(f"blocks.2.{c}") for c in
                                                 ("fc1", "fc2", "norm")], MissingImplementationError, "blocks.2.fc1"),
    # ... or of another type than the body's calls say (incompatible instances)
    "child of another type": (lambda d: d["implementations"].update({"blocks.2.fc1": {
        "name": "blocks.2.fc1", "type": "relu", "inplace": False}}), NodeTypeMismatchError, "blocks.2.fc1"),
    # an instance whose own calling convention disagrees with its body's
    "instance with another signature": (lambda d: _set(d, "blocks.2", meta={"forward_arg_names": ["x", "y"]}),
                                        IRFormatError, "miss a traced argument"),
    # a body whose call of a module outside it names one of its own instances: a cycle
    "instance calling itself": (lambda d: _call_from_body(d, "blocks.0.norm", "blocks.3"), CycleError, "cycle"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_body_references_are_refused(saved, tmp_path, case):
    change, error, message = HOSTILE[case]
    path = _hostile(saved, tmp_path, change)
    with pytest.raises(error, match=message):
        IR.load(path)


def test_the_node_budget_counts_every_instance(saved, tmp_path):
    path = saved[3]
    doc = _doc(path)
    stored = sum(len(b.get("nodes", {})) for b in doc["bodies"].values()) + sum(
        len(e.get("nodes", {})) for e in doc["implementations"].values())
    expanded = sum(len(impl.graph) for impl in IR.load(path).values())
    assert stored < expanded
    IR.load(path, max_nodes=expanded)
    with pytest.raises(IRFormatError, match="over its budget"):
        IR.load(path, max_nodes=expanded - 1)


# -- rewrites ---------------------------------------------------------------------------------------------------
def _sigmoid_tower(model: nn.Module, x: torch.Tensor, swapped: set[int]) -> torch.Tensor:
    for i, block in enumerate(model.blocks):
        act = torch.sigmoid if i in swapped else torch.relu
        x = block.norm(x + block.fc2(act(block.fc1(x))))
    return model.head(x)


@pytest.mark.parametrize(("where", "swapped", "split"), [(None, {0, 1, 2, 3}, []), ("blocks.1", {1}, ["blocks.1"])])
def test_a_rewrite_holds_for_every_instance_and_where_splits_one_off(saved, tmp_path, where, swapped, split):
    from common.rewrite import replace_pattern

    model, args, _, path = saved
    out = replace_pattern(IR.load(path), model.state_dict(), lambda x: torch.relu(x), lambda x: torch.sigmoid(x),
                          where=where)
    assert out.count == len(swapped)
    doc = _doc(out.ir.save(tmp_path / "rewritten.ir.json"))
    written_in_full = [k for k in ("blocks.0", "blocks.1", "blocks.2", "blocks.3")
                       if "$body" not in doc["implementations"][k]]
    assert written_in_full == split  # the rewritten body is shared again; a block rewritten alone is its own
    rebuilt = ir2torch.convert(IR.load(tmp_path / "rewritten.ir.json"), model.state_dict())
    assert torch.equal(rebuilt(*args), _sigmoid_tower(model, args[0], swapped))


def test_shared_groups_of_an_ir_holding_unsavable_values_are_none():
    from common.ir import Implementation
    from common.textview import shared_groups

    ir = IR([Implementation("root", "module"), Implementation("a", "thing", {"w": torch.ones(1)}),
             Implementation("b", "thing", {"w": torch.ones(1)})])
    with pytest.raises(IRSerializationError, match="cannot be stored inline"):  # a file cannot hold it ...
        ir.shared_bodies()
    assert shared_groups(ir) == {}  # ... so the views list no shared body rather than fail
