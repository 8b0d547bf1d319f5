"""Pictures: DOT/Mermaid text, PNG/SVG files, folding with depth, and layouts without overlaps."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import matplotlib.image
import networkx as nx
import pytest

import torch2ir
from common.render import RenderError, drawing_graph, format_of, render, to_dot, to_mermaid
from common.render.image import MAX_PIXELS, layer_positions, save_image, tree_positions
from tests.cli.test_chain import png_size
from tests.models.zoo import by_name


def _ir(name: str):
    case = by_name(name)
    args, kwargs = case.inputs()
    model = case.build()
    return model, args, kwargs, torch2ir.convert(model, args, kwargs)


@pytest.fixture(scope="module")
def nested():
    return _ir("nested_containers")


def _paths(model) -> list[str]:
    return ["root", *(p for p, _ in model.named_modules(remove_duplicate=False) if p)]


@pytest.mark.parametrize("name", ["nested_containers", "shared_sequential", "tied_embedding"])
def test_dot_and_mermaid_name_every_module_path(name):
    model, _, _, ir = _ir(name)
    graph = drawing_graph(ir, collapse=False)  # every block (repeats are folded by default: tests/cli/test_repeats.py)
    dot, mermaid = to_dot(graph), to_mermaid(graph)
    assert dot.startswith("digraph ") and "rankdir=LR;" in dot and dot.rstrip().endswith("}")
    assert mermaid.startswith("flowchart LR\n")
    for path in _paths(model):  # aliases (seq.0 = lin) included
        assert f'"{path}" [label=' in dot, path
        assert f": {path}\n" in mermaid, path
    assert dot.count(" -> ") == mermaid.count(" --> ") == len(_paths(model)) - 1  # a tree


def test_png_and_svg_files(tmp_path, nested):
    _, _, _, ir = nested
    png = render(ir, tmp_path / "tree.png")
    width, height = png_size(png.read_bytes())
    assert matplotlib.image.imread(png).shape[:2] == (height, width) and width > 300 and height > 300
    svg = ET.parse(render(ir, tmp_path / "tree.svg")).getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    text = " ".join(svg.itertext())
    assert "NestedContainers" in text and "blocks" in text and "proj" in text  # text kept as text
    assert render(ir, tmp_path / "tree.svg").read_bytes() == render(ir, tmp_path / "again.svg").read_bytes()


def test_depth_folds_deeper_modules_into_their_ancestor(nested):
    model, _, _, ir = nested
    full, folded = drawing_graph(ir, collapse=False), drawing_graph(ir, depth=1)
    assert set(folded) == {"root", "blocks", "heads", "tail"} and len(full) == len(ir)
    assert folded.nodes["blocks"]["kind"] == "collapsed"
    assert folded.nodes["blocks"]["label"] == "blocks\nModuleList\n+6 modules, 144 params"
    total = sum(p.numel() for p in model.parameters())
    assert total == 324 and drawing_graph(ir, depth=0).nodes["root"]["label"].endswith("+14 modules, 324 params")
    with pytest.raises(RenderError, match="depth must be 0 or more"):
        drawing_graph(ir, depth=-1)


def test_implementation_and_flat_graphs(tmp_path, nested):
    model, args, kwargs, ir = nested
    graph = drawing_graph(ir, impl="blocks.0")
    assert graph.graph["layout"] == "layers"
    assert {a["label"] for _, a in graph.nodes(data=True)} == {"x\ninput", "lin\nlinear", "act\nrelu",
                                                               "add\nadd.Tensor", "output"}
    flat = torch2ir.lower(model, args, kwargs)
    ops = drawing_graph(flat, impl="blocks.0")
    assert {a["kind"] for _, a in ops.nodes(data=True)} == {"op", "weight", "input"}
    assert "lin.weight\nparameter" in {a["label"] for _, a in ops.nodes(data=True)}
    tree = drawing_graph(flat, depth=1)
    assert tree.nodes["blocks"]["label"] == "blocks\n6 ops\n+6 modules"
    with pytest.raises(RenderError, match="no op of the FlatIR ran in module 'nope'"):
        drawing_graph(flat, impl="nope")
    assert "aten" not in to_mermaid(drawing_graph(flat, impl="heads"))  # op names are shortened
    render(flat, tmp_path / "ops.png")
    assert png_size((tmp_path / "ops.png").read_bytes())[0] > 0


def test_formats():
    assert [format_of(f"x.{s}") for s in ("png", "SVG", "dot", "gv", "mmd", "mermaid")] == [
        "png", "svg", "dot", "dot", "mermaid", "mermaid"]
    assert format_of("x.txt", "dot") == "dot"
    with pytest.raises(RenderError, match="cannot tell the picture format"):
        format_of("x.jpg")
    with pytest.raises(RenderError, match="unknown picture format"):
        format_of("x.png", "gif")


def test_tree_layout_gives_every_box_its_own_row():
    tree = nx.balanced_tree(3, 4, create_using=nx.DiGraph)  # 121 nodes, 81 leaves
    tree = nx.relabel_nodes(tree, {0: "root"})
    pos = tree_positions(tree)
    assert len(set(pos.values())) == len(tree)
    leaves = [n for n in tree if tree.out_degree(n) == 0]
    assert sorted(pos[n][1] for n in leaves) == list(range(len(leaves)))
    for parent in tree:
        children = [pos[c][1] for c in tree.successors(parent)]
        if children:
            assert min(children) <= pos[parent][1] <= max(children)
            assert all(pos[c][0] == pos[parent][0] + 1 for c in tree.successors(parent))


def test_layer_layout_routes_long_edges_between_boxes():
    graph = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("w", "c")])
    nx.set_node_attributes(graph, {"a": "input", "w": "get_attr"}, "kind")
    pos, routes = layer_positions(graph)
    assert [pos[n][1] for n in "abcd"] == [0, 1, 2, 3] and pos["w"][1] == 1  # state read just above its reader
    bends = routes[("a", "d")]
    assert [r for _, r in bends] == [1, 2]
    for col, row in bends:  # the long edge never runs through a box
        assert all(abs(col - c) >= 0.5 for n, (c, r) in pos.items() if r == row)
    with pytest.raises(RenderError, match="cycle"):
        layer_positions(nx.DiGraph([("a", "b"), ("b", "a")]))


def test_huge_png_is_refused_with_advice(tmp_path):
    tree = nx.DiGraph(layout="tree")
    tree.add_edges_from(("root", f"m{i}") for i in range(MAX_PIXELS // 4))
    for node in tree:
        tree.nodes[node].update(label=node, kind="leaf")
    with pytest.raises(RenderError, match="too large to read as PNG") as info:
        save_image(tree, tmp_path / "huge.png", "png")
    assert "--depth" in info.value.hint and not (tmp_path / "huge.png").exists()
