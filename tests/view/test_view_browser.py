"""The interactive view in a real browser (headless Chromium): the page loads from ``file://``, expands a block
named in its URL fragment, folds repeated blocks, keeps unexpanded blocks out of the document, draws a graph with
shapes on its edges, and shows hostile IR strings as text. A missing browser fails these tests (see browser.py)."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest

from common.htmlview.data import view_data
from tests.view.browser import Elements, dump_dom, pixels, screenshot
from tests.view.geometry import graph_tags, shown_count
from tests.view.models import END, IMG, SVG, decoder, hostile, small_llama

LOADED = re.compile(r"· IR view · loaded in (\d+) ms$")


def _rows(dom: str) -> list[int]:
    """The node indices of the tree rows in the document (``data-i``)."""
    return [int(a["data-i"]) for a in Elements(dom).named("div") if a.get("data-i") is not None]


def _title(dom: str) -> str:
    return re.search(r"<title>(.*?)</title>", dom, re.S).group(1)


def test_fragment_expands_a_block_and_the_screenshot_shows_it(tmp_path):
    ir = small_llama()
    page = ir.view(tmp_path / "llama.html")
    index = {n["p"]: i for i, n in enumerate(view_data(ir)["nodes"])}
    url = f"{page.as_uri()}#expand=layers.1&select=layers.1.self_attn&graph=layers.1.self_attn"
    dom = dump_dom(url, tmp_path)
    assert LOADED.search(_title(dom)), _title(dom)
    rows = set(_rows(dom))
    block = {index[f"model.layers.1.{n}"] for n in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")}
    assert block <= rows  # the expanded block's children are in the document
    assert {index[f"model.layers.{i}"] for i in range(4)} <= rows  # the run lists its blocks
    assert index["model.layers.2.self_attn"] not in rows and index["model.layers.1.self_attn.q_proj"] not in rows
    shown = Elements(dom).shown()
    assert "layers.0\u20133 \u00d74" in shown  # the folded run's label
    assert "model.layers.1.self_attn" in shown and "f32[1, 16, 64]" in shown and "q_proj" in shown  # panel, graph
    # layers.1's attention is an instance of a shared body: the page draws the home's graph for it
    assert "one shared body with 3 other instances (stored as model.layers.0.self_attn)" in shown
    called = dump_dom(f"{page.as_uri()}#node={quote('model.layers.2.self_attn:q_proj', safe='')}", tmp_path)
    assert "open model.layers.2.self_attn.q_proj" in Elements(called).shown()  # its calls name its own children
    graph = graph_tags(dom)
    shown = shown_count(ir, "model.layers.1.self_attn")  # 52 nodes, 2 of them unused None inputs (hidden)
    assert sum(t == "svg" for t, _ in graph) == 1 and sum(t == "rect" for t, _ in graph) == shown == 50  # a box a node
    png = pixels(screenshot(url, tmp_path))
    assert png.shape[:2] == (800, 1280)
    assert png[..., :3].std() > 0.05 and len({tuple(p) for p in png[::8, ::8, :3].reshape(-1, 3).tolist()}) > 30


def test_a_folded_run_opens_one_block_at_a_time_and_loads_fast(tmp_path):
    ir = decoder(80)
    page = ir.view(tmp_path / "decoder.html")
    first = dump_dom(page.as_uri(), tmp_path, budget_ms=None)  # real time: the load time is measured
    assert "layers.0\u201379 \u00d780" in Elements(first).shown()
    assert len(_rows(first)) == 2  # root and layers: no block is in the document until asked for
    load_ms = int(LOADED.search(_title(first)).group(1))
    assert load_ms < 5000, f"the view of 80 blocks took {load_ms} ms to load"
    index = {n["p"]: i for i, n in enumerate(view_data(ir)["nodes"])}
    opened = dump_dom(f"{page.as_uri()}#expand=layers.41", tmp_path)
    rows = _rows(opened)
    assert len(rows) == 2 + 80 + 2  # the run's 80 blocks, and the children of block 41 only
    assert {index["layers.41.up"], index["layers.41.down"]} <= set(rows) and index["layers.40.up"] not in rows


def test_hostile_strings_are_shown_as_text(tmp_path):
    page = hostile().view(tmp_path / "hostile.html")
    url = f"{page.as_uri()}#select={quote(IMG, safe='')}&graph={quote(IMG, safe='')}&search={quote('<', safe='')}"
    dom = dump_dom(url, tmp_path)
    parsed = Elements(dom)
    title = html.unescape(_title(dom))
    assert LOADED.search(title) and title.startswith(f"{END} · IR view"), title  # the script ran to its end, alone
    assert not parsed.named("img") and len(parsed.named("script")) == 3
    assert [a.get("class") for t, a in parsed.tags if t == "svg"] in (["graph-svg"], ["graph-svg", "mini"])  # no other
    assert not [(t, a) for t, a in parsed.tags for a in a if a.lower().startswith("on")]  # no handler anywhere
    shown = parsed.shown()
    for text in (IMG, END, SVG):
        assert text in shown  # shown, as text
    assert "&lt;img src=x onerror=" in dom and "&lt;/script&gt;&lt;script&gt;" in dom


def test_a_missing_browser_fails_the_test_naming_the_package(tmp_path, monkeypatch):
    from tests.view import browser

    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    with pytest.raises(pytest.fail.Exception, match=r"no-chromium is missing: .*apt-get install -y chromium"):
        dump_dom("about:blank", tmp_path)


def test_search_finds_graph_nodes_by_op_and_shape_and_a_fragment_opens_one(tmp_path):
    ir = small_llama()
    page = ir.view(tmp_path / "llama.html")
    dom = dump_dom(f"{page.as_uri()}#search=rsqrt", tmp_path)  # the op as the graph shows it: "rsqrt"
    hits = [e for e in Elements(dom).named("div") if "node-hit" in (e.get("class") or "")]
    rsqrt = [k for k in ir for g in ir[k].graphs() for n in g.nodes if g.node(n).get("implementation") ==
             "aten.rsqrt.default"]
    assert rsqrt and len(hits) == len(rsqrt)  # every node calling the op, in every graph
    assert "0 modules, " + str(len(rsqrt)) + " graph nodes" in Elements(dom).shown()
    where = rsqrt[0]
    name = next(n for n in ir[where].nodes if ir[where].node(n).get("implementation") == "aten.rsqrt.default")
    opened = dump_dom(f"{page.as_uri()}#node={quote(where + ':' + name, safe='')}", tmp_path)
    focused = [e for e in Elements(opened).named("g") if e.get("data-focus") == "1"]
    assert len(focused) == 1  # the graph is drawn with that node selected
    assert f"Node {name}" in Elements(opened).shown() and "rsqrt" in Elements(opened).shown()
    shaped = dump_dom(f"{page.as_uri()}#search={quote('f32[1, 16, 1]', safe='')}", tmp_path)  # by output shape
    assert len([e for e in Elements(shaped).named("div") if "node-hit" in (e.get("class") or "")]) >= len(rsqrt)


def test_an_instance_row_that_reads_otherwise_is_drawn_as_its_own(tmp_path):
    import torch2ir
    from tests.common.test_bodies import _tower

    model, args = _tower()
    ir = torch2ir.convert(model, args)
    ir["blocks.2.fc1"].meta["class"] = "my.pkg.FancyLinear"
    page = ir.view(tmp_path / "tower.html")
    shown = Elements(dump_dom(f"{page.as_uri()}#node={quote('blocks.2:fc1', safe='')}", tmp_path)).shown()
    assert "FancyLinear" in shown and "open blocks.2.fc1" in shown
    other = Elements(dump_dom(f"{page.as_uri()}#node={quote('blocks.3:fc1', safe='')}", tmp_path)).shown()
    assert "FancyLinear" not in other and "open blocks.3.fc1" in other


@pytest.mark.parametrize("fragment", [
    "node=__proto__:x", "node=constructor:x", "node=toString:x", "node=hasOwnProperty:valueOf",
    "expand=" + ",".join(f"a{i % 10}" for i in range(20000)),  # a command line holds at most 128 KiB
    "graph=layers.1&inplace=" + ",".join(f"n{i % 10}" for i in range(20000)),
    "graph=layers&inplace=" + ",".join(["up", "down", "0", "1"] * 5000),
    "search=" + "a" * 100000,
    "graph=root&stack=__proto__&plumbing=constructor&stack=0&plumbing=1",
], ids=["proto", "constructor", "toString", "hasOwnProperty", "expand-20000", "inplace-20000", "inplace-calls",
        "long-search", "toggles"])
@pytest.mark.parametrize("compare", [False, True], ids=["view", "compare"])
def test_a_hostile_link_opens_the_page_in_under_a_second(tmp_path, fragment, compare):
    """Unknown or hostile fragment keys name nothing and long lists are capped: the page loads (its title says
    so, which the scripts set last) within a second of real time, also in a compare page."""
    ir = decoder(80)
    page = ir.view(tmp_path / "decoder.html", compare=decoder(80) if compare else None)
    dom = dump_dom(f"{page.as_uri()}#{fragment}", tmp_path, budget_ms=None)
    loaded = re.search(r"loaded in (\d+) ms$", _title(dom))
    assert loaded, _title(dom)
    assert int(loaded.group(1)) < 1000, _title(dom)
