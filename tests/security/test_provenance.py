"""Hostile values in ``meta.provenance`` (records of common.rewrite): data only, every bad value an IRFormatError
on load, nothing runs."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import torch2ir
from common import IR
from common.errors import IRFormatError, UnsafeNameError
from common.rewrite import fold_batchnorm

MARKER = "PROVENANCE_MARKER"
RUN = f"__import__('os').system('touch {MARKER}')"


@pytest.fixture(scope="module")
def folded(tmp_path_factory) -> dict:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    ir = torch2ir.convert(model, (torch.randn(1, 3, 8, 8),))
    new_ir, _ = fold_batchnorm(ir, model.state_dict())
    path = tmp_path_factory.mktemp("prov") / "folded.ir.json"
    new_ir.save(path)
    doc = json.loads(path.read_text())
    assert doc["implementations"]["0"]["meta"]["provenance"][0]["pass"] == "fold_batchnorm"
    return doc


def _record(**change) -> list:
    rec = {"pass": "fold_batchnorm", "from": [{"key": "0", "type": "conv2d", "source": "0"}]}
    rec.update(change)
    return [rec]


HOSTILE = {
    "not a list": {"pass": "x", "from": []},
    "a string": RUN,
    "record not a dict": [RUN],
    "extra record field": [{"pass": "x", "from": [], "code": RUN}],
    "missing from": [{"pass": "x"}],
    "pass not a string": _record(**{"pass": {"$dtype": "float32"}}),
    "empty pass": _record(**{"pass": ""}),
    "huge pass": _record(**{"pass": "x" * 10_000}),
    "from not a list": _record(**{"from": RUN}),
    "from entry extra field": _record(**{"from": [{"key": "0", "type": "t", "source": "0", "eval": RUN}]}),
    "key with code": _record(**{"from": [{"key": RUN, "type": "t", "source": "0"}]}),
    "source dunder": _record(**{"from": [{"key": "0", "type": "t", "source": "__class__"}]}),
    "source nn.Module attribute": _record(**{"from": [{"key": "0", "type": "t", "source": "a.forward"}]}),
    "source path traversal": _record(**{"from": [{"key": "0", "type": "t", "source": "../../etc"}]}),
    "source not a string": _record(**{"from": [{"key": "0", "type": "t", "source": 7}]}),
    "type not a string": _record(**{"from": [{"key": "0", "type": ["conv2d"], "source": "0"}]}),
    "too many entries": _record(**{"from": [{"key": "0", "type": "t", "source": "0"}] * 5000}),
    "too many records": _record() * 300,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_provenance_is_refused_on_load(name, folded, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = json.loads(json.dumps(folded))
    doc["implementations"]["0"]["meta"]["provenance"] = HOSTILE[name]
    path = tmp_path / "bad.ir.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(IRFormatError, match="provenance") as info:
        IR.load(path)
    assert "provenance" in (info.value.key or "") or isinstance(info.value, UnsafeNameError)
    assert not (tmp_path / MARKER).exists()


def test_the_untouched_document_loads(folded, tmp_path):
    path = tmp_path / "good.ir.json"
    path.write_text(json.dumps(folded))
    assert IR.load(path)["0"].meta["provenance"][0]["from"][1]["type"] == "batchnorm2d"
