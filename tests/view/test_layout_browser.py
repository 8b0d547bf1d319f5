"""The view's graph layout, measured in a real browser: drawn by the vendored dagre, every edge routed around the
nodes that are not its ends, no edge label over another label or a node, nothing outside the canvas; the graph
fitted to its pane and the root's graph drawn on open. Checked on graphs of BERT and of a Llama layer at
Llama-2-70B's dimensions (ResNet-50's are checked with torchvision in tests/ecosystems/test_view_layout.py)."""

from __future__ import annotations

import functools
import re

import pytest
import torch

import torch2ir
from tests.view.browser import Elements, dump_dom
from tests.view.geometry import drawing, graph_tags, problems, shown_count


@functools.cache
def _bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                 max_position_embeddings=64, vocab_size=100, attn_implementation="eager")).eval()
    ids = torch.zeros((2, 8), dtype=torch.long)
    return torch2ir.convert(model, (ids,), {"attention_mask": torch.ones((2, 8), dtype=torch.long)})


@functools.cache
def _llama_70b_layer():
    from benchmarks.models import llama_70b

    return torch2ir.convert(llama_70b(layers=1), (torch.zeros((1, 16), dtype=torch.long, device="meta"),))


def _checked(ir, key, tmp_path):
    page = ir.view(tmp_path / "v.html")
    dom = dump_dom(f"{page.as_uri()}#graph={key}", tmp_path)
    d = drawing(dom)
    assert d.count == shown_count(ir, key) and d.edges, key
    assert problems(d) == [], key
    return d


@pytest.mark.parametrize("key", ["root", "encoder.layer.0", "encoder.layer.0.attention.self", "embeddings"])
def test_bert_graphs_are_drawn_without_crossings_or_overlaps(key, tmp_path):
    d = _checked(_bert(), key, tmp_path)
    assert d.labels  # the tensors on the edges are labelled


@pytest.mark.parametrize("key", ["model.layers.0", "model.layers.0.self_attn", "model"])
def test_a_llama_70b_layer_is_drawn_without_crossings_or_overlaps(key, tmp_path):
    d = _checked(_llama_70b_layer(), key, tmp_path)
    assert any(abs((b[2] - b[0]) - (6.2 * len("f32[1, 16, 8192]") + 8)) < 1e-6 for b in d.labels)


def test_the_root_graph_is_drawn_on_open_and_fitted_to_its_pane(tmp_path):
    ir = _bert()
    page = ir.view(tmp_path / "v.html")
    dom = dump_dom(page.as_uri(), tmp_path)
    svg = Elements(dom).named("svg")[0]
    d = drawing(dom)
    assert d.count == shown_count(ir, "root")  # no click needed
    width = float(svg["width"])
    assert width <= d.width + 1e-6 and width >= 0.25 * d.width - 1e-6  # fitted: scaled down at most to a quarter
    assert re.search(r">fit<", dom)  # and a button brings the fit back after zooming


def test_the_checks_see_a_crossing_an_overlap_and_a_label_outside():
    from tests.view.geometry import Drawing

    nodes = [(0, 0, 50, 30), (0, 100, 50, 130), (100, 50, 150, 80)]
    crossing = Drawing(200, 200, nodes, [(0, 1, [(25, 30), (125, 65), (25, 100)])], [])
    assert problems(crossing) == ["edge 0->1 crosses node 2", "edge 0->1 crosses node 2"]
    around = Drawing(200, 200, nodes, [(0, 1, [(25, 30), (75, 65), (25, 100)])], [(60, 40, 90, 54)])
    assert problems(around) == []
    labels = Drawing(200, 200, nodes, [], [(60, 40, 90, 54), (80, 45, 110, 59), (190, 0, 210, 14)])
    assert problems(labels) == ["label 1 overlaps label 0", "label 1 overlaps node 2", "label 2 leaves the canvas"]


def test_a_value_read_by_every_layer_gets_reference_boxes_not_edges_across_the_graph(tmp_path):
    from benchmarks.models import llama_sweep

    ir = torch2ir.convert(llama_sweep(8), (torch.zeros((1, 16), dtype=torch.long, device="meta"),))
    page = ir.view(tmp_path / "v.html")
    dom = dump_dom(f"{page.as_uri()}#graph=model&stack=0&plumbing=1", tmp_path)  # every layer's call on its own
    d = drawing(dom)
    assert d.count == ir["model"].node_count and problems(d) == []
    proxies = [a for a in Elements(dom).named("g") if a.get("class") == "proxy"]
    # values read by more than 5 nodes (the rotary tables, the mask, ... read by the 8 layers): one edge to the first
    # reader, a reference box above each other one
    graph = ir["model"].graph
    fanned = {n: len(set(graph.successors(n)) - {n}) for n in graph.nodes}
    assert len(proxies) == sum(k - 1 for k in fanned.values() if k > 5) > 0
    assert sum(1 for k in fanned.values() if k >= 8) >= 2  # cos and sin at least
    assert "\u2191 " in Elements(dom).shown()


def test_calls_drawn_in_place_nest_and_are_fed_as_the_rebuild_binds_them(tmp_path):
    from common.htmlview.data import view_data

    ir = _bert()
    data = view_data(ir)["impls"]
    layer, attention, self_ = "encoder.layer.0", "encoder.layer.0.attention", "encoder.layer.0.attention.self"
    (outer,) = [r for r in data[layer]["g"][0]["n"] if r[5] == attention]
    (inner,) = [r for r in data[attention]["g"][0]["n"] if r[5] == self_]
    page = ir.view(tmp_path / "v.html")
    dom = dump_dom(f"{page.as_uri()}#graph={layer}&inplace={outer[0]},{outer[0]}/{inner[0]}&plumbing=1", tmp_path)
    d = drawing(dom)
    assert d.clusters == 2
    assert d.count == ir[layer].node_count - 1 + ir[attention].node_count - 1 + ir[self_].node_count
    assert problems(d) == []
    # boxes are drawn in walking order: the layer's nodes before its attention call, then the attention's nodes
    # before its self-attention call, then the self-attention's: each of its inputs has one edge, from the attention
    # node its binding names (as the rebuild binds the call's arguments)
    at_outer = data[layer]["g"][0]["n"].index(outer)
    at_inner = data[attention]["g"][0]["n"].index(inner)
    first = at_outer + at_inner
    inputs = [k for k, r in enumerate(data[self_]["g"][0]["n"]) if r[1] == "input"]
    edges = {(a, b) for a, b, _ in d.edges}
    for position, k in enumerate(inputs):
        j = inner[6][1][position]
        into = [a for a, b, _ in d.edges if b == first + k]
        assert into == ([at_outer + j] if j >= 0 else []), (position, into)
        assert j < 0 or (at_outer + j, first + k) in edges
    # the calls themselves are not drawn: their graphs are
    assert outer[0] not in d.names and inner[0] not in d.names


def _chain_ir(n: int):
    """A root graph of ``n`` ops in one chain, a residual add every 10th: deep enough to overflow dagre's
    recursion (thousands of rows)."""
    from common.ir import IR, Implementation
    from common.values import Ref

    meta = {"shape": [1, 64], "dtype": torch.float32}
    ir = IR()
    root = ir.add(Implementation("root", "module", meta={"class": "Chain"}))
    prev = skip = root.add_node("x", "input", "input", meta=meta)
    for i in range(n):
        reads = [prev, skip] if i % 10 == 9 else [prev]
        node = root.add_node(f"op_{i}", "function", "aten.add.Tensor" if len(reads) == 2 else "aten.relu.default",
                             args=[Ref(r) for r in reads], kwargs={}, meta=meta)
        for slot, r in enumerate(reads):
            root.add_edge(r, node, slot=slot)
        skip = node if len(reads) == 2 else skip
        prev = node
    out = root.add_node("output", "output", "output", args=[[Ref(prev)]], kwargs={})
    root.add_edge(prev, out, slot=(0, 0))
    return ir


@pytest.mark.parametrize("n", [1900, 2900])
def test_a_graph_too_deep_or_large_for_dagre_is_still_drawn(n, tmp_path):
    page = _chain_ir(n).view(tmp_path / "chain.html")
    dom = dump_dom(page.as_uri(), tmp_path, budget_ms=None)
    assert re.search(r"loaded in \d+ ms</title>", dom)  # the script ran to its end
    # every node drawn (the simple layering when dagre cannot)
    assert sum(t == "rect" for t, _ in graph_tags(dom)) == n + 2
