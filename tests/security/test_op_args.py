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


def test_a_chunk_of_an_empty_dim_into_a_million_views_is_refused_at_load(tmp_path: Path) -> None:
    """``chunk`` of an empty dim returns ``chunks`` empty views whatever the tensor's size (``chunks=10**6`` ran for
    minutes in the long op-level fuzz of the default surface): a literal count above 10**5 is refused at load,
    naming the node, in both IR levels; an honest count runs as in eager."""

    class Chunk(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack(torch.chunk(x, 3))

    x = torch.randn(6, 2)
    assert len(torch.chunk(torch.zeros(0, 3), 10**6)) == 10**6  # what the kernel does
    for flat in (False, True):
        ir = torch2ir.lower(Chunk(), (x,)) if flat else torch2ir.convert(Chunk(), (x,))
        assert torch.equal(ir2torch.convert(ir)(x), Chunk()(x))
        path = tmp_path / ("chunk.flat.json" if flat else "chunk.ir.json")
        ir.save(path)
        doc = json.loads(path.read_text())
        nodes = doc["nodes"] if flat else list(doc["implementations"]["root"]["nodes"].values())
        node = next(n for n in nodes if (n.get("op_type") or n.get("implementation")) == "aten.chunk.default")
        if flat:
            node["args"]["chunks"] = 10**6
        else:
            node["args"][1] = 10**6
        path.write_text(json.dumps(doc))
        with pytest.raises(ArgumentMismatchError, match=r"'chunks' is 1000000, more than 100000") as info:
            (FlatIR if flat else IR).load(path)
        assert info.value.node is not None
