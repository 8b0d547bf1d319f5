"""Two IRs side by side (``ir2torch view A --compare B``, ``ir.view(path, compare=other)``): counterparts by path or
by a rewrite's provenance, what was added, removed or changed marked in the tree and the graphs, both sides synced
in a real browser, hostile strings of either file shown as text."""

from __future__ import annotations

import html
import re

import torch
from torch import nn

import ir2torch
import torch2ir
from common.htmlview import view_html
from common.htmlview.compare import compare_data
from common.htmlview.data import view_data
from common.rewrite import fold_batchnorm, fuse_qkv
from ir2torch.cli import main
from tests.cli.helpers import command, explain, run
from tests.view.browser import Elements, dump_dom
from tests.view.models import END, IMG, hostile

COMPARED = re.compile(r" · IR compare · loaded in (\d+) ms$")


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.bn(self.conv(x))))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.o_proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self.o_proj(torch.softmax(q @ k.transpose(-1, -2), -1) @ v)


def _folded():
    torch.manual_seed(0)
    model = ConvNet().eval()
    ir = torch2ir.convert(model, (torch.randn(1, 3, 8, 8),))
    folded, _ = fold_batchnorm(ir, model.state_dict())
    return ir, folded


def _compare(a, b):
    return compare_data(a, b, view_data(a), view_data(b))


def test_a_folded_batchnorm_is_removed_and_its_conv_and_caller_changed():
    ir, folded = _folded()
    cmp = _compare(ir, folded)
    assert cmp["m"][0] == {"root": "changed", "conv": "changed", "bn": "removed"}
    assert cmp["m"][1] == {"root": "changed", "conv": "changed"}  # the folded conv: new weights, new provenance
    assert cmp["pair"][1]["conv"] == "conv" and "bn" not in cmp["pair"][0]
    assert cmp["pair"][0]["head.1"] == "head.1"  # untouched modules stand for themselves
    # in the root's graph: the bn call is gone, the activation now reads the conv
    assert cmp["n"][0]["root"] == {"0:bn": "removed", "0:act": "changed"}
    assert cmp["n"][1]["root"] == {"0:act": "changed"}
    assert cmp["count"] == {"added": 0, "removed": 1, "changed": 2}


def test_an_ir_compared_with_the_conversion_of_its_rebuild_marks_nothing():
    torch.manual_seed(0)
    model = ConvNet().eval()
    args = (torch.randn(1, 3, 8, 8),)
    ir = torch2ir.convert(model, args)
    again = torch2ir.convert(ir2torch.convert(ir, model.state_dict()), args)
    cmp = _compare(ir, again)
    assert cmp["m"] == [{}, {}] and cmp["n"] == [{}, {}]
    assert cmp["count"] == {"added": 0, "removed": 0, "changed": 0}
    assert cmp["pair"][0] == {key: key for key in ir}


def test_a_fused_projection_stands_for_one_it_replaced_and_the_others_are_removed():
    torch.manual_seed(0)
    model = Attention().eval()
    ir = torch2ir.convert(model, (torch.randn(2, 4, 8),))
    fused, _ = fuse_qkv(ir, model.state_dict())
    cmp = _compare(ir, fused)
    (new,) = set(fused.keys()) - set(ir.keys())  # the fused Linear
    assert cmp["pair"][1][new] in {"q_proj", "k_proj", "v_proj"} and cmp["m"][1][new] == "changed"
    gone = {"q_proj", "k_proj", "v_proj"} - {cmp["pair"][1][new]}
    assert {k: cmp["m"][0][k] for k in gone} == dict.fromkeys(gone, "removed")
    assert "o_proj" not in cmp["m"][0] and "o_proj" not in cmp["m"][1]  # o_proj itself is untouched
    # the root's graph reads the fused Linear's slices where it called three projections
    assert cmp["n"][1]["root"][f"0:{new}"] == "added"


def test_the_page_shows_both_sides_synced_and_marked(tmp_path):
    ir, folded = _folded()
    page = ir.view(tmp_path / "cmp.html", compare=folded, names=("before.ir.json", "folded.ir.json"))
    dom = dump_dom(f"{page.as_uri()}#select=conv&graph=root", tmp_path)
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert COMPARED.search(title), title
    parsed = Elements(dom)
    shown = parsed.shown()
    assert "before.ir.json \u2192 folded.ir.json: 2 modules changed, 0 added, 1 removed" in shown
    assert shown.count("changed on both sides") == 2  # both panels show the selected conv
    rows: dict[str, str] = {}
    for a in parsed.named("div"):  # the left tree comes first in the document
        if a.get("data-i") is not None:
            rows.setdefault(a["data-i"], a.get("class") or "")
    index_a = {n["p"]: str(i) for i, n in enumerate(view_data(ir)["nodes"])}
    assert "d-removed" in rows[index_a["bn"]] and "d-changed" in rows[index_a["conv"]]
    boxes = [a.get("class", "") for a in parsed.named("g") if "node" in (a.get("class") or "")]
    assert len(boxes) == 6 + 5  # the root's graph drawn on both sides (6 nodes before, 5 after)
    assert sum("d-removed" in c for c in boxes) == 1 and sum("d-changed" in c for c in boxes) == 2
    # a node picked on the left is looked up on the right: absent there
    picked = Elements(dump_dom(f"{page.as_uri()}#node=root:bn", tmp_path)).shown()
    assert "not in this graph (removed)" in picked and "removed" in picked


def test_hostile_strings_of_the_other_file_stay_text(tmp_path):
    page = hostile().view(tmp_path / "hostile.html", compare=hostile())
    text = page.read_text(encoding="utf-8")
    assert text.count("<script") == 5 and IMG not in text and END not in text  # three data elements, two scripts
    dom = dump_dom(page.as_uri(), tmp_path)
    parsed = Elements(dom)
    assert COMPARED.search(html.unescape(re.search(r"<title>(.*?)</title>", dom, re.S).group(1)))
    assert not parsed.named("img") and not [(t, a) for t, a in parsed.tags for a in a if a.lower().startswith("on")]
    assert "0 modules changed, 0 added, 0 removed" in parsed.shown()


def test_cli_compares_two_files_and_refuses_a_flat_ir(tmp_path, capsys):
    ir, folded = _folded()
    a, b = ir.save(tmp_path / "a.ir.json"), folded.save(tmp_path / "b.ir.json")
    done = run(command("ir2torch", "view", a, "--compare", b, "-o", tmp_path / "cmp.html"))
    assert done.returncode == 0, explain(done)
    assert 'id="ir-data-b"' in (tmp_path / "cmp.html").read_text(encoding="utf-8")
    assert view_html(ir, compare=folded) == view_html(ir, compare=folded)  # deterministic
    flat = torch2ir.lower(ConvNet().eval(), (torch.randn(1, 3, 8, 8),)).save(tmp_path / "n.flat.json")
    assert main(["view", str(a), "--compare", str(flat), "-o", str(tmp_path / "x.html")]) == 2
    assert "is a FlatIR" in capsys.readouterr().err and not (tmp_path / "x.html").exists()
    assert main(["view", str(a), "--compare", str(tmp_path / "nope.ir.json"), "-o", str(tmp_path / "y.html")]) == 2
    assert "nope.ir.json" in capsys.readouterr().err and not (tmp_path / "y.html").exists()


def test_two_input_shapes_mark_the_nodes_whose_tensors_differ():
    torch.manual_seed(0)
    model = ConvNet().eval()
    small = torch2ir.convert(model, (torch.randn(1, 3, 8, 8),))
    batch = torch2ir.convert(model, (torch.randn(4, 3, 8, 8),))
    cmp = _compare(small, batch)
    assert cmp["count"]["added"] == cmp["count"]["removed"] == 0  # the same modules and nodes
    assert cmp["pair"][0] == {key: key for key in small}
    marked = cmp["n"][1]["root"]
    # every node of the root carrying a tensor of the batch size is marked; the output node carries none
    tensors = {f"0:{n}" for n in small["root"].nodes if small["root"].node(n).get("meta") is not None}
    assert tensors and set(marked) >= tensors and set(marked.values()) == {"changed"}


def test_a_call_drawn_in_place_on_one_side_is_drawn_in_place_on_the_other(tmp_path):
    ir, folded = _folded()
    page = ir.view(tmp_path / "cmp.html", compare=folded)
    dom = dump_dom(f"{page.as_uri()}#graph=root&inplace=head", tmp_path)
    clusters = [a for a in Elements(dom).named("g") if a.get("class") == "cluster"]
    assert len(clusters) == 2  # the Sequential head drawn inside the root's graph, left and right
