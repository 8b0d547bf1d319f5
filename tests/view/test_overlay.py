"""Overlays: a number per module or graph node drawn on the view; ``ir2torch verify --report`` writes one.

Hostile overlay files (every field a file can carry: the document, keys, values) give only ``IRFormatError``s and
write nothing; keys naming nothing in the IR are counted on the page and by the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torch2ir
from common.errors import IRFormatError
from common.htmlview.data import view_data
from common.htmlview.overlay import check_overlay, read_overlay
from common.state_dict import load_safetensors, save_safetensors
from ir2torch.cli import main
from tests.view.browser import Elements, dump_dom


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Sequential(nn.Linear(8, 8), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x) * 2)


@pytest.fixture
def files(tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    torch2ir.convert(model, (torch.randn(2, 8),)).save(tmp_path / "in.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "in.safetensors")
    return tmp_path


@pytest.mark.parametrize(("text", "match"), [
    ("[1, 2]", "JSON object"),
    ('{"a": NaN}', "NaN, which is not a JSON number"),
    ('{"a": Infinity}', "Infinity"),
    ('{"a": true}', "not a finite number"),
    ('{"a": "1"}', "not a finite number"),
    ('{"a": [1]}', "not a finite number"),
    ('{"a": 1, "a": 2}', "names 'a' twice"),
    ('{"": 1}', "not a module path"),
    ('{"a\\u0000b": 1}', "not a module path"),
    ('{"' + "x" * 2001 + '": 1}', "not a module path"),
    ("{", "is not JSON"),
    ('{"a": 1e999}', "not a finite number"),
])
def test_hostile_overlays_are_refused_naming_the_problem(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(IRFormatError, match=match):
        read_overlay(path)


def test_overlay_size_and_entry_caps(tmp_path, monkeypatch):
    import common.htmlview.overlay as overlay

    monkeypatch.setattr(overlay, "MAX_ENTRIES", 3)
    with pytest.raises(IRFormatError, match="4 entries, more than 3"):
        check_overlay({str(i): 1 for i in range(4)})
    monkeypatch.setattr(overlay, "MAX_BYTES", 10)
    (tmp_path / "big.json").write_text('{"layers.0": 1.0}')
    with pytest.raises(IRFormatError, match="more than 10"):
        read_overlay(tmp_path / "big.json")
    with pytest.raises(IRFormatError, match="cannot read"):
        read_overlay(tmp_path / "missing.json")


def test_overlay_data_matches_modules_and_nodes_and_counts_the_rest(files):
    from common.ir import IR

    ir = IR.load(files / "in.ir.json")
    node = next(n for n in ir["root"].nodes if ir["root"].node(n).get("implementation") == "aten.mul.Tensor")
    data = view_data(ir, {"a": 2.0, "b.0": 0.5, f"root:{node}": 1.0, "nowhere": 3.0, "b.1": None}, "cost")["ov"]
    assert data["m"] == {"a": [2.0, "2"], "b.0": [0.5, "0.5"], "b.1": [None, "n/a"]}
    assert data["n"] == {f"root:{node}": [1.0, "1"]} and data["unmatched"] == 1
    assert (data["lo"], data["hi"], data["name"]) == (0.5, 2.0, "cost")
    assert "ov" not in view_data(ir)


def test_verify_report_is_an_overlay_the_view_draws(files, capsys):
    broken = load_safetensors(files / "in.safetensors")
    broken["b.0.bias"] = broken["b.0.bias"] + 1  # the second Linear diverges; the first does not
    save_safetensors(broken, files / "broken.safetensors")
    code = main(["verify", str(files / "in.ir.json"), "--state", str(files / "broken.safetensors"), "--against",
                 str(files / "in.ir.json"), "--original-state", str(files / "in.safetensors"), "-i", "2x8", "-q",
                 "--report", str(files / "report.json")])
    assert code == 1 and "wrote" in capsys.readouterr().out
    report = json.loads((files / "report.json").read_text())
    assert report["a"] == 0.0 and report["b.0"] == pytest.approx(1.0) and report["b"] > 0 and report["root"] > 0
    assert main(["view", str(files / "in.ir.json"), "-o", str(files / "v.html"), "--overlay",
                 str(files / "report.json"), "-q"]) == 0
    dom = dump_dom((files / "v.html").as_uri() + "#graph=root", files)
    badges = {e.get("data-v") for e in Elements(dom).named("span") if e.get("class") == "ov"}
    assert {"0", "1"} <= badges  # module a (exact) and b.0 (off by one) in the tree
    drawn = [e.get("data-ov") for e in Elements(dom).named("g") if e.get("data-ov") is not None]
    assert "0" in drawn and len(drawn) >= 2  # the root graph's calls of a and b coloured by their values
    assert "overlay report:" in Elements(dom).shown()


def test_the_cli_says_how_many_overlay_keys_name_nothing(files, capsys):
    (files / "o.json").write_text(json.dumps({"a": 1, "nope.x": 2, "root:nothing": 3}))
    assert main(["view", str(files / "in.ir.json"), "-o", str(files / "o.html"), "--overlay", str(files / "o.json"),
                 "-q"]) == 0
    assert "overlay: 2 of 3 keys name no module or node of in.ir.json" in capsys.readouterr().out
    (files / "bad.json").write_text('{"a": NaN}')
    assert main(["view", str(files / "in.ir.json"), "-o", str(files / "bad.html"), "--overlay",
                 str(files / "bad.json"), "-q"]) == 2
    assert not (files / "bad.html").exists()
