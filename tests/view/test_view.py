"""The interactive view's file (``ir.view``, ``ir2torch view``) without a browser: one self-contained HTML file
whose embedded data is the IR's tree, runs, graphs and records, and whose IR strings cannot end its script."""

from __future__ import annotations

import json
import re

import pytest
import torch

import torch2ir
from common.htmlview import view_html
from common.htmlview.data import produced, view_data
from common.htmlview.page import embed_json
from common.render import render
from tests.cli.helpers import command, explain, run
from tests.models.zoo import by_name
from tests.view.models import END, IMG, decoder, hostile, nested_runs, small_llama

DATA = re.compile(r'<script id="ir-data" type="application/json">(.*?)</script>', re.S)


def _data(html: str) -> dict:
    found = DATA.findall(html)
    assert len(found) == 1, "exactly one data element"
    return json.loads(found[0])


def test_view_is_one_self_contained_file(tmp_path):
    ir = small_llama()
    path = ir.view(tmp_path / "llama.html")
    html = path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.count("<script") == 3 and html.count("</script>") == 3
    # nothing is fetched: no external reference, and the policy forbids any request and any other script
    assert not re.search(r"\b(src|href)\s*=", html) and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in policy and "connect-src 'none'" in policy and "unsafe-inline" not in policy
    data = _data(html)
    assert data == json.loads(json.dumps(view_data(ir)))
    assert data["title"] == "LlamaForCausalLM" and data["summary"][0].startswith("model ")


def test_tree_folds_the_identical_layers_and_keeps_every_block(tmp_path):
    data = view_data(small_llama())
    nodes = data["nodes"]
    paths = [n["p"] for n in nodes]
    assert paths[0] == "root" and len(paths) == len(set(paths)) == len(small_llama())
    layers = nodes[paths.index("model.layers")]
    assert len(layers["ch"]) == 1  # one entry: the run
    label, members = layers["ch"][0]
    assert label == "layers.0\u20133 \u00d74" and [paths[m] for m in members] == [f"model.layers.{i}" for i in range(4)]
    layer1 = nodes[paths.index("model.layers.1")]
    assert {paths[c] for c in layer1["ch"]} == {f"model.layers.1.{n}" for n in
                                                  ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")}
    assert nodes[paths.index("model.layers.1.self_attn.q_proj")]["x"] == "4.1k params"


def test_graph_edges_carry_the_recorded_shapes():
    ir = small_llama()
    data = view_data(ir)
    attn = data["impls"]["model.layers.1.self_attn"]
    # the four layers share their bodies: the page holds the home's graphs once, each instance names it
    assert attn["sb"] == ["model.layers.0.self_attn", 4] and "g" not in attn
    graph = data["impls"]["model.layers.0.self_attn"]["g"][0]
    names = [n[0] for n in graph["n"]]
    assert len(names) == ir["model.layers.1.self_attn"].graph.number_of_nodes()
    q = names.index("q_proj")
    assert graph["n"][q][1:4] == ["call", "Linear", "f32[1, 16, 64]"]
    assert graph["n"][q][5] == "model.layers.0.self_attn.q_proj"
    into_q = [e for e in graph["e"] if e[1] == q]
    assert [(names[e[0]], e[2]) for e in into_q] == [("hidden_states", "f32[1, 16, 64]")]
    # a call of a module with a graph records no meta: the label is what the callee returns
    layer = ir["model.layers.0"]
    assert produced(ir, layer, "mlp") == {"shape": [1, 16, 64], "dtype": ir["model.layers.0.mlp.down_proj"]
                                          .state["weight"]["dtype"]}
    attn_out = produced(ir, layer, "self_attn", 1)  # the attention weights, item 1 of a flat 2-tuple
    assert attn_out["shape"] == [1, 4, 16, 16]
    assert produced(ir, ir["root"], "model") is None  # a model output class: no label rather than a guess
    state = {row[0]: row for row in data["impls"]["model.layers.1.self_attn.q_proj"]["s"]}
    assert state["weight"][1:3] == ["parameter", "f32[64, 64]"]
    assert ["in_features", "64"] in data["impls"]["model.layers.1.self_attn.q_proj"]["a"]


def test_a_big_decoder_is_folded_in_one_entry():
    ir = decoder(80)
    data = view_data(ir)
    layers = data["nodes"][1]
    assert layers["p"] == "layers" and layers["ch"][0][0] == "layers.0\u201379 \u00d780" and len(layers["ch"]) == 1
    assert len(data["nodes"]) == len(ir) == 2 + 80 * 3


def test_runs_inside_runs_are_folded_in_every_block(tmp_path):
    ir = nested_runs()
    data = view_data(ir)
    paths = [n["p"] for n in data["nodes"]]
    for i in range(3):  # each block's experts are a run of their own, so any block opens folded the same way
        label, members = data["nodes"][paths.index(f"layers.{i}.experts")]["ch"][0]
        assert label == "experts.0\u20133 \u00d74" and [paths[m] for m in members][-1] == f"layers.{i}.experts.3"
    # the pictures fold both levels (a run inside a dropped block used to raise KeyError)
    dot = render(ir, tmp_path / "moe.dot").read_text()
    assert '"layers.0.experts.0" [label="0-3 x4' in dot and '"layers.1' not in dot
    assert "0-2 x3  Block" in ir.summary() and "0-3 x4  linear  (16 params each)" in ir.summary()


def test_hostile_strings_cannot_leave_the_data_element():
    html = view_html(hostile())
    assert html.count("</script>") == 3 and html.count("<script") == 3  # the payloads' tags are escaped
    assert IMG not in html and END not in html and "<img" not in html and "<svg onload" not in html
    data = _data(html)
    assert data["title"] == END and IMG in data["impls"] and data["impls"][IMG]["a"] == [["size", END]]
    assert embed_json({"a": "</script><!--&"}) == '{"a":"\\u003c/script\\u003e\\u003c!--\\u0026"}'
    with pytest.raises(ValueError):
        embed_json({"x": float("nan")})


def test_cli_writes_the_view_and_refuses_other_files(tmp_path, capsys):
    from ir2torch.cli import main

    ir_path = small_llama().save(tmp_path / "llama.ir.json")
    done = run(command("ir2torch", "view", ir_path, "-o", tmp_path / "out" / "llama.html"))
    assert done.returncode == 0, explain(done)
    assert done.stdout.startswith(f"wrote {tmp_path / 'out' / 'llama.html'} (")
    assert _data((tmp_path / "out" / "llama.html").read_text(encoding="utf-8"))["nodes"][0]["p"] == "root"
    # the refusals run in this process (the command's code is the same; a subprocess costs torch's start-up)
    assert main(["view", str(ir_path), "-o", str(tmp_path / "llama.png")]) == 2
    err = capsys.readouterr().err
    assert "the view is an HTML file" in err and len(err.splitlines()) == 1
    assert main(["view", str(tmp_path / "nope.ir.json"), "-o", str(tmp_path / "x.html")]) == 2
    assert "nope.ir.json" in capsys.readouterr().err and not (tmp_path / "x.html").exists()
    case = by_name("nested_containers")
    args, kwargs = case.inputs()
    flat = torch2ir.lower(case.build(), args, kwargs).save(tmp_path / "nested.flat.json")
    assert main(["view", str(flat), "-o", str(tmp_path / "flat.html")]) == 2
    assert "is a FlatIR" in capsys.readouterr().err and not (tmp_path / "flat.html").exists()


def test_an_instance_whose_calls_read_otherwise_gets_its_own_rows():
    from tests.common.test_bodies import _tower

    model, args = _tower()
    ir = torch2ir.convert(model, args)
    ir["blocks.2.fc1"].meta["class"] = "my.pkg.FancyLinear"  # alike blocks, but this child is of another class
    data = view_data(ir)
    home = data["impls"]["blocks.0"]["g"][0]["n"]
    block = data["impls"]["blocks.2"]
    assert block["sb"] == ["blocks.0", 4] and "g" not in block
    (graph, index, row), = block["ro"]  # the one row that reads otherwise: the call of fc1
    assert graph == 0 and home[index][0] == "fc1" and row[2] == "FancyLinear" and row[5] == "blocks.2.fc1"
    assert home[index][2] == "Linear" and "ro" not in data["impls"]["blocks.3"]


def test_plumbing_is_only_what_nothing_reads():
    """Export's checks and inputs that record no value are hidden when nothing reads them; a read input, an unused
    tensor input and a check some node reads stay drawn."""
    from common.htmlview.data import plumbing
    from common.ir import IR, Implementation
    from common.values import Ref

    meta = {"shape": [2], "dtype": torch.float32}
    ir = IR()
    root = ir.add(Implementation("root", "module", meta={"class": "M"}))
    x = root.add_node("x", "input", "input", meta=meta)
    root.add_node("mask", "input", "input")  # None, read by nothing: hidden
    root.add_node("unused", "input", "input", meta=meta)  # a tensor nobody reads: drawn
    check = root.add_node("check", "function", "aten._assert_tensor_metadata.default", args=[Ref(x)], kwargs={})
    root.add_edge(x, check, slot=0)
    scalar = root.add_node("scalar", "function", "aten._assert_scalar.default", args=[Ref(x)], kwargs={})
    root.add_edge(x, scalar, slot=0)
    read = root.add_node("read", "function", "aten.relu.default", args=[Ref(scalar)], kwargs={}, meta=meta)
    root.add_edge(scalar, read, slot=0)  # a check something reads: drawn
    out = root.add_node("output", "output", "output", args=[[Ref(read)]], kwargs={})
    root.add_edge(read, out, slot=(0, 0))
    assert plumbing(root) == ["mask", "check"]
    names = [r[0] for r in view_data(ir)["impls"]["root"]["g"][0]["n"]]
    assert [names[i] for i in view_data(ir)["impls"]["root"]["g"][0]["h"]] == ["mask", "check"]
