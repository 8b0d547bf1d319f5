"""Pictures and ``ir2torch show`` draw a run of identical blocks once (``0-1 x2``); ``--no-collapse`` draws all."""

from __future__ import annotations

import torch

import torch2ir
from common.render import drawing_graph, render, to_dot
from common.render.repeats import fold_repeats, ir_signatures
from tests.cli.helpers import command, explain, run
from tests.models.zoo import by_name


def _nested():
    case = by_name("nested_containers")
    args, kwargs = case.inputs()
    model = case.build()
    return model, args, torch2ir.convert(model, args, kwargs)


def test_render_folds_identical_blocks_and_keeps_one_expanded(tmp_path):
    _, args, ir = _nested()
    graph = drawing_graph(ir)
    assert "blocks.1" not in graph and "blocks.1.lin" not in graph
    assert graph.nodes["blocks.0"]["label"] == "0-1 x2\nSkipConnection"
    assert graph.nodes["blocks.0.lin"]["label"] == "lin\nLinear\n72 params"  # the first block's inside is drawn
    assert graph.nodes["blocks.0"]["repeat"] == (0, 1, 2, ["blocks.0", "blocks.1"])
    dot = render(ir, tmp_path / "tree.dot").read_text()
    assert '"blocks.0" [label="0-1 x2\\nSkipConnection"' in dot and '"blocks.1"' not in dot
    full = to_dot(drawing_graph(ir, collapse=False))
    assert '"blocks.1.lin"' in full
    # the FlatIR's module tree folds the same way (same ops in the same order)
    with torch.device("meta"):
        meta_model = by_name("nested_containers").build()
    flat = torch2ir.lower(meta_model, tuple(a.to("meta") for a in args))
    flat_tree = drawing_graph(flat)
    assert "blocks.1" not in flat_tree and flat_tree.nodes["blocks.0"]["label"].startswith("0-1 x2\n")
    assert "blocks.1" in drawing_graph(flat, collapse=False)


def test_blocks_that_differ_in_a_weight_tie_are_not_folded():
    _, _, ir = _nested()
    signatures = ir_signatures(ir)
    assert signatures["blocks.0"] == signatures["blocks.1"]
    ir["blocks.1.lin"].state["weight"]["tie"] = "heads.proj.weight"  # block 1 now shares a weight outside itself
    changed = ir_signatures(ir)
    assert changed["blocks.0"] != changed["blocks.1"] and changed["root"] != signatures["root"]
    tree = drawing_graph(ir, collapse=False)
    assert set(fold_repeats(tree, changed)) == set(tree)


def test_show_folds_and_no_collapse_expands(tmp_path):
    _, _, ir = _nested()
    path = ir.save(tmp_path / "nested.ir.json")
    folded = run(command("ir2torch", "show", path))
    full = run(command("ir2torch", "show", path, "--no-collapse"))
    assert folded.returncode == 0 and full.returncode == 0, explain(folded) + explain(full)
    assert "0-1 x2  SkipConnection" in folded.stdout and "└─ 1  SkipConnection" not in folded.stdout
    assert "└─ 1  SkipConnection" in full.stdout and "0-1 x2" not in full.stdout
    out = tmp_path / "tree.mmd"
    drawn = run(command("ir2torch", "render", path, "-o", out, "--no-collapse"))
    assert drawn.returncode == 0, explain(drawn)
    assert ": blocks.1.lin\n" in out.read_text()
