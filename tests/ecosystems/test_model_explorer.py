"""Google's Model Explorer opens IR files through common.explorer's adapter, checked with the real package: its
extension manager finds and runs the adapter, the graph is made of its own ``graph_builder`` classes, every module
call is expanded into the module's layer (checked against the real model's modules), edges name existing nodes,
an overlay becomes its per-node data, and hostile strings stay data."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import torch2ir
from common.errors import IRFormatError
from common.explorer import ADAPTER_ID, explorer_graph, node_data
from common.explorer.graph import layer
from common.ir import IR
from tests.ecosystems import load
from tests.view.models import END, IMG, hostile


@pytest.fixture(scope="module")
def explorer():
    load.model_explorer()
    from model_explorer.extension_manager import ExtensionManager

    manager = ExtensionManager(["common.explorer"])
    manager.load_extensions()
    return manager


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        max_position_embeddings=32, vocab_size=50, use_cache=False, attn_implementation="sdpa")).eval()
    return model, torch2ir.convert(model, (torch.zeros((1, 8), dtype=torch.long),))


def _run(manager, path):
    cmd = {"extensionId": ADAPTER_ID, "cmdId": "convert", "modelPath": str(path), "settings": {},
           "deleteAfterConversion": False}
    return manager.run_cmd(cmd)["graphs"][0]


def test_model_explorer_finds_the_adapter_and_opens_a_saved_llama_with_its_layers(explorer, tmp_path):
    assert ADAPTER_ID in {e.metadata.id for e in explorer.extensions}
    model, ir = _llama()
    path = ir.save(tmp_path / "llama.ir.json")  # stores the three decoder layers once (shared bodies)
    graph = _run(explorer, path)
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert len(nodes) == len(graph["nodes"])  # unique ids
    for n in graph["nodes"]:  # every edge names a node that exists
        assert all(e["sourceNodeId"] in nodes for e in n["incomingEdges"]), n["id"]
    namespaces = {n["namespace"] for n in graph["nodes"]}
    # every module with a graph of its own (not a torch leaf) is a layer, named by its path in the real model
    own = {path for path, m in model.named_modules() if path and type(m).__module__.startswith("transformers")}
    assert {layer(p) for p in own} <= namespaces
    assert {"model/layers/0/self_attn", "model/layers/2/mlp"} <= namespaces
    # torch's own modules are one node each, named after their real class
    leaves = {p: type(m).__name__ for p, m in model.named_modules() if type(m).__module__.startswith("torch.nn")
              and not list(m.children())}
    called = {a["value"]: n["label"] for n in graph["nodes"] for a in n["attrs"] if a["key"] == "calls"}
    assert called == leaves
    # the decoder layers' calls name their own children: one q_proj node per layer
    q = sorted(n["namespace"] for n in graph["nodes"] if n["label"] == "Linear" and
               any(a["value"].endswith(".q_proj") for a in n["attrs"] if a["key"] == "calls"))
    assert q == [f"model/layers/{i}/self_attn" for i in range(3)]
    tensors = [a["value"] for n in graph["nodes"] for m in n["outputsMetadata"] for a in m["attrs"]]
    assert "f32[1, 8, 32]" in tensors


def test_the_graph_is_made_of_model_explorers_own_classes(explorer):
    from model_explorer import graph_builder

    from common.explorer.main import to_graph

    _, ir = _llama()
    data = explorer_graph(ir)
    built = to_graph(data)
    assert isinstance(built, graph_builder.Graph) and isinstance(built.nodes[0], graph_builder.GraphNode)
    assert dataclasses.asdict(built) == data  # the plain JSON is exactly Model Explorer's format


def test_an_overlay_becomes_per_node_data(explorer):
    from model_explorer import node_data_builder

    _, ir = _llama()
    data = node_data(ir, {"model.layers.1.mlp.down_proj": 5.0, "model.layers.1.mlp": 2.0, "nowhere": 1.0,
                          "root:output": None}, name="max abs diff")
    results = data["model"]["results"]
    graph = explorer_graph(ir)
    mlp = [n["id"] for n in graph["nodes"] if n["namespace"] == "model/layers/1/mlp"]
    down = [i for i in mlp if i.endswith("/down_proj")]
    assert len(down) == 1 and results[down[0]] == {"value": 5.0}  # the leaf's own number
    assert all(results[i] == {"value": 2.0} for i in mlp if i not in down)  # its layer's number
    assert len(results) == len(mlp)  # nothing for keys naming nothing, or for None
    # Model Explorer's own classes accept it
    node_data_builder.GraphNodeData(results={k: node_data_builder.NodeDataResult(value=v["value"])
                                             for k, v in results.items()})


def test_hostile_strings_stay_data():
    graph = explorer_graph(hostile())  # names and values no saved file could hold (the view's hostile IR)
    text = [a["value"] for n in graph["nodes"] for a in n["attrs"]] + [n["label"] for n in graph["nodes"]]
    assert any(IMG in t for t in text) and any(END in t for t in text)
    with pytest.raises(IRFormatError, match="no 'root'"):
        explorer_graph(IR())


def test_a_callee_is_fed_what_the_call_passes_it():
    _, ir = _llama()
    nodes = {n["id"]: n for n in explorer_graph(ir)["nodes"]}
    attention_input = nodes["model.layers.0.self_attn/hidden_states"]
    # LlamaRMSNorm has a graph of its own: the attention reads what its output node returns
    assert [e["sourceNodeId"] for e in attention_input["incomingEdges"]] == ["model.layers.0.input_layernorm/output"]
    # each input node of an expanded module has at most one edge in: what the call passes for it, or none (a constant)
    inputs = [n for n in nodes.values() if n["label"] in ("hidden_states", "attention_mask", "position_ids")
              and n["namespace"]]
    assert inputs and all(len(n["incomingEdges"]) <= 1 for n in inputs)
