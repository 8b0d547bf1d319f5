"""The view reads an LLM (issue 52): the calls of a run of identical blocks are one stack box in the caller's graph,
a graph opens centred with its text at least 9 px on screen (a minimap when it is larger than its pane), edges have
arrowheads, a call drawn in place is fitted and scrolled into view, the compare view marks changes inside folded
runs as the tree does, a clicked node's details come before the raw calling-convention records, and export plumbing
is hidden until asked. Measured in headless Chromium at 1280 x 800 on a Llama with Llama-3-70B dimensions and 80
layers (converted on ``meta``), BERT and small hand-built models."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import torch
from torch import nn

import torch2ir
from common.htmlview.data import plumbing, view_data
from common.rewrite import fold_batchnorm
from tests.view.browser import Elements, dump_dom
from tests.view.geometry import drawing, graph_tags, problems, shown_count
from tests.view.models import decoder, small_llama

SIZE = (1280, 800)
STACK = "layers.0\u201379 \u00d780"
CSS = (Path(__file__).resolve().parents[2] / "common" / "htmlview" / "view.css").read_text(encoding="utf-8")
#: the smallest font of the drawing (px at zoom 1): the edge labels' and reference boxes' 10 px
SMALLEST = min(float(v) for v in re.findall(r"svg[^{}]*text[^{}]*\{[^}]*?(\d+(?:\.\d+)?)px", CSS))


@functools.cache
def _llama_70b():
    from benchmarks.models import llama_70b

    return torch2ir.convert(llama_70b(), (torch.zeros((1, 16), dtype=torch.long, device="meta"),))


@functools.cache
def _bert():
    from tests.view.test_layout_browser import _bert

    return _bert()


def _state(dom: str, prefix: str = "") -> tuple[float, list[float]]:
    """The zoom of a side's graph and the part of it on show (graph units: x0, y0, x1, y1), as the page keeps them."""
    graph = next(a for a in Elements(dom).named("div") if a.get("id") == prefix + "graph")
    return float(graph["data-zoom"]), [float(v) for v in graph["data-view"].split()]


def _boxes(dom: str, cls: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """The ``<g>`` boxes of the first graph whose class starts with ``cls``: (class, (x0, y0, x1, y1))."""
    out, tags = [], graph_tags(dom)
    for i, (tag, attrs) in enumerate(tags):
        if tag == "g" and (attrs.get("class") or "").startswith(cls):
            x, y = (float(v) for v in re.match(r"translate\(([-\d.e]+),([-\d.e]+)\)", attrs["transform"]).groups())
            rect = next(a for t, a in tags[i + 1:] if t == "rect")
            out.append((attrs["class"], (x, y, x + float(rect["width"]), y + float(rect["height"]))))
    return out


def test_the_smallest_text_is_read_from_the_style():
    assert SMALLEST == 10  # edge labels; node names 12 px, ops 11 px


def test_the_70b_decoder_draws_its_80_layers_as_one_stack_box(tmp_path):
    ir = _llama_70b()
    page = ir.view(tmp_path / "l70.html")
    dom = dump_dom(f"{page.as_uri()}#graph=model", tmp_path, size=SIZE)
    d = drawing(dom)
    graph = ir["model"].graphs()[0]
    calls = [n for n in graph.nodes if str(graph.node(n).get("implementation", "")).startswith("model.layers.")]
    assert len(calls) == 80
    assert d.count == shown_count(ir, "model") - 80 + 1 and d.names.count(STACK) == 1  # 80 calls, one box
    assert problems(d) == []
    stack = d.names.index(STACK)
    into = {a for a, b, _ in d.edges if b == stack}
    assert len(into) == len([a for a, b, _ in d.edges if b == stack]) <= 5  # one edge per value the layers read
    assert [d.names[b] for a, b, _ in d.edges if a == stack] == ["norm"]
    # the bounding box: 80 layers took an 8000 x 7750 px staircase; now the graph of the decoder's own ops
    assert d.width < 1200 and d.height < 1600, (d.width, d.height)  # measured: 1029 x 1430
    zoom, view = _state(dom)
    assert zoom * SMALLEST >= 9  # readable on first paint
    assert view[1] <= 1  # its top on show (the inputs)
    svgs = [a.get("class") for t, a in Elements(dom).tags if t == "svg"]
    assert svgs == ["graph-svg", "mini"]  # larger than its pane: a minimap
    stacks = [c for c, _ in _boxes(dom, "node k-stack")]
    assert stacks == ["node k-stack"]
    # arrowheads: every edge ends in the page's marker
    edges = [a for t, a in graph_tags(dom) if t == "path" and a.get("class") == "edge"]
    assert edges and all(a.get("marker-end") == "url(#arrow)" for a in edges)
    assert any(t == "marker" and a.get("id") == "arrow" for t, a in graph_tags(dom))
    # stack=0 draws every call on its own (the staircase the box replaces)
    each = drawing(dump_dom(f"{page.as_uri()}#graph=model&stack=0", tmp_path, size=SIZE))
    assert each.count == shown_count(ir, "model") and STACK not in each.names
    assert each.height > 5 * d.height, (each.width, each.height)  # every call drawn: 7913 x 7750


def test_the_70b_root_opens_centred_and_draws_its_decoder_in_place_in_view(tmp_path):
    ir = _llama_70b()
    page = ir.view(tmp_path / "l70.html")
    dom = dump_dom(page.as_uri(), tmp_path, size=SIZE)
    d = drawing(dom)
    assert d.count == ir["root"].node_count == 5 and problems(d) == []
    zoom, view = _state(dom)
    assert zoom == 1 and view[0] < 0 and view[2] > d.width  # it fits: whole, at zoom 1 ...
    assert abs((view[0] + view[2]) / 2 - d.width / 2) <= 2  # centred
    assert abs((view[1] + view[3]) / 2 - d.height / 2) <= 20
    assert [a.get("class") for t, a in Elements(dom).tags if t == "svg"] == ["graph-svg"]  # no minimap
    # the decoder drawn in place: its box fitted (zoom between 0.9 and 1) and scrolled to (its top, centred)
    dom = dump_dom(f"{page.as_uri()}#graph=root&inplace=model", tmp_path, size=SIZE)
    d = drawing(dom)
    assert d.clusters == 1 and STACK in d.names and problems(d) == []
    assert d.width < 1400 and d.height < 1900, (d.width, d.height)  # the 70B root's box, decoder included: 1260 x 1684
    ((_, box),) = _boxes(dom, "cluster")
    zoom, view = _state(dom)
    assert 0.9 <= zoom <= 1
    assert abs((view[0] + view[2]) / 2 - (box[0] + box[2]) / 2) <= 2  # centred on the box
    assert view[1] - 1 <= box[1] <= view[1] + 20  # its top at the top of the pane (the box is higher than the pane)


def test_text_is_at_least_9_px_on_first_paint(tmp_path):
    """BERT's root and a compare page opened with their text shrunk to 4-6 px by fitting to the pane."""
    ir = _bert()
    page = ir.view(tmp_path / "bert.html")
    for url in (page.as_uri(), f"{page.as_uri()}#graph=encoder.layer.0"):
        zoom, _ = _state(dump_dom(url, tmp_path, size=SIZE))
        assert zoom * SMALLEST >= 9, (url, zoom)
    page = ir.view(tmp_path / "cmp.html", compare=ir)
    dom = dump_dom(f"{page.as_uri()}#graph=encoder.layer.0", tmp_path, size=SIZE)
    for prefix in ("", "b-"):
        zoom, _ = _state(dom, prefix)
        assert zoom * SMALLEST >= 9, (prefix, zoom)


def test_a_call_drawn_in_place_is_fitted_and_scrolled_into_view(tmp_path):
    ir = _bert()
    layer = "encoder.layer.0"
    (call,) = [r[0] for r in view_data(ir)["impls"][layer]["g"][0]["n"] if r[5] == "encoder.layer.0.output"]
    page = ir.view(tmp_path / "bert.html")
    dom = dump_dom(f"{page.as_uri()}#graph={layer}&inplace={call}", tmp_path, size=SIZE)
    ((_, box),) = _boxes(dom, "cluster")
    zoom, view = _state(dom)
    assert 0.9 <= zoom <= 1
    assert abs((view[0] + view[2]) / 2 - (box[0] + box[2]) / 2) <= 2  # centred on the box
    high = box[3] - box[1] > view[3] - view[1] - 16
    assert view[1] <= box[1] and (high or box[3] <= view[3]), (box, view)  # its top, or all of it, on show
    assert drawing(dom).height > view[3] - view[1]  # the graph itself is larger than the pane: it was scrolled


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3)
        self.blocks = nn.ModuleList(Block() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return x


def _run_rows(dom: str) -> list[tuple[str, str]]:
    """The tree rows of runs, in document order: (class, badge text)."""
    row = r'<div class="(row[^"]*)" data-run="\d+">.*?(?:<span class="dm">([^<]*)</span>)?<span class="cls">'
    return re.findall(row, dom)


def test_compare_marks_a_folded_run_whose_blocks_changed_in_the_tree_and_the_graph(tmp_path):
    torch.manual_seed(0)
    model = Tower().eval()
    ir = torch2ir.convert(model, (torch.randn(1, 3, 10, 10),))
    folded, _ = fold_batchnorm(ir, model.state_dict())
    blocks = next(n for n in view_data(ir)["nodes"] if n["p"] == "blocks")
    assert blocks["ch"][0][0] == "blocks.0\u20132 \u00d73"  # a run on the left; on the right each folded conv's
    # provenance names its own block's batch norm, so the blocks are no longer identical up to their path
    page = ir.view(tmp_path / "cmp.html", compare=folded)
    dom = dump_dom(f"{page.as_uri()}#graph=root", tmp_path, size=SIZE)
    assert _run_rows(dom) == [("row d-changed", "changed 3/3")]  # the run's row on the left
    stacks = [a.get("class") for a in Elements(dom).named("g") if "k-stack" in (a.get("class") or "")]
    assert stacks == ["node k-stack d-changed"]  # the stack box of the root's graph on the left, as its row
    right = dom[dom.index('id="b-graph"'):]  # on the right, the three calls of changed blocks: changed inside
    calls = re.findall(r'<g class="node k-call d-inside[^"]*"[^>]*><rect[^>]*></rect><text[^>]*>(blocks_\d)<', right)
    assert calls == ["blocks_0", "blocks_1", "blocks_2"]
    tree = Elements(dom[dom.index('id="b-tree"'):]).named("div")
    rows = {a["data-i"]: a.get("class") for a in tree if a.get("data-i")}
    index = {n["p"]: str(i) for i, n in enumerate(view_data(folded)["nodes"])}
    assert rows[index["blocks"]] == "row"  # the same itself (a dot: something inside differs), its blocks changed
    assert [rows[index[f"blocks.{i}"]] for i in range(3)] == ["row d-changed"] * 3
    assert dom.count('<span class="dmi"') >= 2  # the tree's ancestors say something inside differs


def test_compare_marks_one_changed_block_of_a_run_as_the_tree_does(tmp_path):
    a, b = decoder(4, ops=4), decoder(4, ops=4)
    b["layers.2.up"].data["bias"] = True
    page = a.view(tmp_path / "cmp.html", compare=b)
    dom = dump_dom(f"{page.as_uri()}#graph=root", tmp_path, size=SIZE)
    # left: one run of 4, one block of it changed; right: layers.2 differs now, so the run is layers.0-1 only
    assert _run_rows(dom) == [("row d-changed", "changed 1/4"), ("row", "")]
    stacks = [a.get("class") for a in Elements(dom).named("g") if "k-stack" in (a.get("class") or "")]
    assert stacks == ["node k-stack d-changed", "node k-stack"]
    right = dom[dom.index('id="b-graph"'):]
    assert re.search(r'<g class="node k-call d-inside[^"]*"[^>]*><rect[^>]*></rect><text[^>]*>layers_2<', right)


def test_node_details_come_before_the_raw_specs_and_plumbing_is_hidden_until_asked(tmp_path):
    ir = small_llama()
    page = ir.view(tmp_path / "llama.html")
    dom = dump_dom(f"{page.as_uri()}#node=model.layers.1.self_attn:q_proj", tmp_path, size=SIZE)
    assert dom.index(">Node q_proj<") < dom.index(">Attributes<") < dom.index("<details")
    assert re.search(r'<details class="raw"><summary>calling convention \(in_spec, out_spec[^)]*\)</summary>', dom)
    assert dom.index(">in_spec<") > dom.index("<details")  # the JSON is inside the folded part
    # export plumbing: hidden, counted on a button; plumbing=1 draws it
    hidden = plumbing(ir["model"].graphs()[0])
    assert len(hidden) == 7 and "_assert_tensor_metadata_default" in hidden
    dom = dump_dom(f"{page.as_uri()}#graph=model&stack=0", tmp_path, size=SIZE)
    d = drawing(dom)
    assert d.count == ir["model"].node_count - 7 and not set(hidden) & set(d.names)
    assert ">show plumbing (7)<" in dom
    dom = dump_dom(f"{page.as_uri()}#graph=model&stack=0&plumbing=1", tmp_path, size=SIZE)
    d = drawing(dom)
    assert d.count == ir["model"].node_count and set(hidden) <= set(d.names) and ">hide plumbing<" in dom
    assert problems(d) == []


def test_the_docs_show_the_screenshots():
    from tests.view.screenshots import DOCS, SHOTS

    text = (DOCS.parent / "cli.md").read_text(encoding="utf-8")
    for name, alt in SHOTS.items():
        assert f"![{alt}](img/{name})" in text, name
        assert 0 < (DOCS / name).stat().st_size < 120_000, name  # small: a 64-colour palette
