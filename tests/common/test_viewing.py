"""Opening a file whose output class no installed library registers (an IR of a transformers model, received by a
team without transformers): refused for a rebuild with the module to import, readable for viewing.

The file here names ``acme.outputs.FancyOutput``, a class nothing registers in any process, so the test does not
depend on whether another test imported transformers first.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRFormatError
from common.ir import IR
from common.textview import ir_summary_lines
from common.treespec import UnknownType, describe_spec, load_spec, viewing

FANCY = "acme.outputs.FancyOutput"


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x * 2


@pytest.fixture
def fancy_file(tmp_path):
    """An IR whose root returns a ``FancyOutput`` of two tensors (a tuple's spec with the type renamed)."""
    path = tmp_path / "fancy.ir.json"
    torch2ir.convert(Pair(), (torch.randn(3),)).save(path)
    doc = json.loads(path.read_text())
    root = doc["implementations"]["root"]["meta"]
    spec = json.loads(root["out_spec"])
    assert spec[1]["type"] == "builtins.tuple"
    spec[1]["type"] = FANCY
    root["out_spec"] = json.dumps(spec)
    path.write_text(json.dumps(doc))
    return path


def test_loading_for_a_rebuild_names_the_module_to_import(fancy_file):
    with pytest.raises(IRFormatError, match="FancyOutput") as info:
        IR.load(fancy_file)
    assert "import acme.outputs first" in info.value.hint and "for_viewing=True" in info.value.hint


def test_loading_for_viewing_keeps_a_named_placeholder_and_a_rebuild_still_refuses(fancy_file):
    ir = IR.load(fancy_file, for_viewing=True)
    assert list(ir) == ["root"] and any("Pair" in line for line in ir_summary_lines(ir))
    with viewing():
        spec = load_spec(ir["root"].meta["out_spec"], "meta.out_spec")
    assert spec.type is UnknownType and spec.context == FANCY and spec.num_leaves == 2
    assert describe_spec(spec) == "FancyOutput(*, *)"
    with pytest.raises(IRFormatError, match="FancyOutput"):  # read strictly again: no placeholder model
        ir2torch.convert(ir, {})
    with pytest.raises(IRFormatError, match="FancyOutput"):  # the lenient reading was not remembered
        IR.load(fancy_file)


def test_refused_types_stay_refused_while_viewing():
    text = json.dumps([1, {"type": "collections.defaultdict", "context": "{}", "children_spec": []}])
    with viewing(), pytest.raises(IRFormatError, match="defaultdict"):
        load_spec(text, "meta.out_spec")


def test_show_view_and_diff_open_it(fancy_file, tmp_path, capsys):
    from ir2torch.cli import main

    assert main(["show", str(fancy_file)]) == 0
    assert "root" in capsys.readouterr().out
    assert main(["view", str(fancy_file), "-o", str(tmp_path / "fancy.html")]) == 0
    assert (tmp_path / "fancy.html").stat().st_size > 1000
    assert main(["diff", str(fancy_file), str(fancy_file)]) == 0
