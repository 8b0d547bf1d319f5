"""Enum arguments (dtype, layout, memory format) must be the real thing, written in the file.

ATen casts an int given for a ``ScalarType``/``Layout``/``MemoryFormat`` argument without a range check: the
op-level fuzz crashed the process with ``aten.addmm.dtype(..., out_dtype=64)``. Both IR levels refuse such a
node at load with an ``ArgumentMismatchError`` naming the node and the argument.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import ArgumentMismatchError


class _Cast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(3, dtype=torch.float64).sum() + x.to(torch.float16).float()


@pytest.mark.parametrize("value", [64, -1, 6, "float32", [7]])
@pytest.mark.parametrize("flat", [False, True], ids=["ir", "flat"])
def test_an_int_where_a_dtype_belongs_is_refused_at_load(tmp_path: Path, value: object, flat: bool) -> None:
    model, x = _Cast(), torch.randn(2, 3)
    path = tmp_path / ("m.flat.json" if flat else "m.ir.json")
    (torch2ir.lower(model, (x,)) if flat else torch2ir.convert(model, (x,))).save(path)
    honest = FlatIR.load(path) if flat else IR.load(path)
    assert torch.equal(ir2torch.convert(honest)(x), model(x))
    text = path.read_text()
    assert text.count('{"$dtype": "float64"}') + text.count('"$dtype": "float64"') >= 1
    doc = json.loads(text)
    _replace_dtype(doc, "float64", value)
    path.write_text(json.dumps(doc))
    with pytest.raises(ArgumentMismatchError, match=r"must be a torch\.dtype") as info:
        FlatIR.load(path) if flat else IR.load(path)
    assert info.value.node is not None


def _replace_dtype(value: object, name: str, new: object) -> bool:
    """Replace the first ``{"$dtype": name}`` in ``value`` by ``new``."""
    if isinstance(value, dict):
        for key, item in value.items():
            if item == {"$dtype": name}:
                value[key] = new
                return True
            if _replace_dtype(item, name, new):
                return True
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if item == {"$dtype": name}:
                value[i] = new
                return True
            if _replace_dtype(item, name, new):
                return True
    return False


def test_a_layout_given_as_an_int_is_refused_in_a_flat_document(tmp_path: Path) -> None:
    model, x = _Cast(), torch.randn(2, 3)
    path = tmp_path / "m.flat.json"
    torch2ir.lower(model, (x,)).save(path)
    doc = json.loads(path.read_text())
    zeros = next(n for n in doc["nodes"] if n["op_type"].startswith("aten.zeros"))
    zeros["kwargs"]["layout"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(ArgumentMismatchError, match=r"'layout' must be a torch\.layout"):
        FlatIR.load(path)
