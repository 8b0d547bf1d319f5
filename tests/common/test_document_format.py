"""Telling an IR file from a FlatIR file (``common.flat_files.document_format``, used by ``ir2torch.convert(path)``
and ``ir2torch show``): from the header ``save`` writes first, or from the whole document when it starts otherwise;
the loader chosen still parses and checks everything."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRFormatError
from common.flat_files import document_format
from common.flat_schema import FLAT_FORMAT
from common.serialize import IR_FORMAT


@pytest.fixture(scope="module")
def model_and_input():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval(), torch.randn(2, 4)


def test_saved_files_are_told_apart_and_rebuilt(tmp_path, model_and_input):
    model, x = model_and_input
    ir = torch2ir.convert(model, (x,))
    ir_path, flat_path = ir.save(tmp_path / "m.ir.json"), ir.lower().save(tmp_path / "m.flat.json")
    assert (document_format(ir_path), document_format(flat_path)) == (IR_FORMAT, FLAT_FORMAT)
    for path in (ir_path, flat_path):
        rebuilt = ir2torch.convert(path, model.state_dict())
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


@pytest.mark.parametrize("layout", ["format_last", "indented", "format_not_a_plain_name"])
def test_a_document_written_otherwise_is_read_whole(tmp_path, model_and_input, layout):
    model, x = model_and_input
    doc = json.loads(torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json").read_text())
    if layout == "format_last":
        doc = {**{k: v for k, v in doc.items() if k != "format"}, "format": doc["format"]}
        text = json.dumps(doc)
    elif layout == "indented":
        text = json.dumps(doc, indent=3)
    else:
        doc["format"] = "torch2ir ir"
        text = json.dumps(doc)
    path = tmp_path / "edited.json"
    path.write_text(text)
    assert document_format(path) == doc["format"]
    if layout == "format_not_a_plain_name":
        with pytest.raises(IRFormatError, match="torch2ir ir"):
            ir2torch.convert(path)
    else:
        torch.testing.assert_close(ir2torch.convert(path, model.state_dict())(x), model(x), rtol=0, atol=0)


def test_a_header_the_rest_of_the_document_contradicts_is_refused(tmp_path, model_and_input):
    """A second ``format`` key further on: the header picks the FlatIR loader, which reads the whole document."""
    model, x = model_and_input
    text = torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json").read_text()
    head = '{\n "format": "torch2ir.ir"'
    assert text.startswith(head)
    path = tmp_path / "two_headers.json"
    path.write_text(text.replace(head, f'{{"format": "{FLAT_FORMAT}", "format": "{IR_FORMAT}"', 1))
    assert document_format(path) == FLAT_FORMAT
    with pytest.raises(IRFormatError):
        ir2torch.convert(path)
