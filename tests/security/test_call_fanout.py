"""A call fan-out is refused at load, before anything runs (issue 50): a few KB whose modules each call their child
twice, 40 deep, would run 2**40 leaf calls. Every module call is counted as expanded by validation."""

from __future__ import annotations

import importlib
import itertools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

import ir2torch
import torch2ir
from common import IR
from common.errors import ResourceBudgetError
from common.expansion import MAX_EXPANDED_NODES
from tests.models.zoo import ConvNet

_VALIDATE = importlib.import_module("common.validate")  # the module (``common.validate`` is also its function)


def fanout(depth: int, calls: int = 2) -> dict:
    """``root`` calls ``c`` ``calls`` times, ``c`` calls ``c.c`` as often, ... ``depth`` levels; the last one runs
    one ``relu``."""
    impls = {}
    for d in range(depth):
        key = "root" if d == 0 else ".".join(["c"] * d)
        child = ".".join(["c"] * (d + 1))
        nodes = {"x": {"name": "x", "type": "input", "implementation": "input"}}
        if d < depth - 1:
            names = [f"call{i}" for i in range(calls)]
            nodes.update({n: {"name": n, "type": "module", "implementation": child} for n in names})
            chain = ["x", *names, "output"]
        else:
            nodes["relu"] = {"name": "relu", "type": "function", "implementation": "aten.relu.default"}
            chain = ["x", "relu", "output"]
        nodes["output"] = {"name": "output", "type": "output", "implementation": "output"}
        impls[key] = {"name": key, "type": "module", "nodes": nodes,
                      "edges": {(a, b): {"src": a, "dst": b} for a, b in itertools.pairwise(chain)}}
    return impls


class _Lookups(Mapping):
    """The caller -> callees map :func:`common.expansion.check_expanded` reads, counting its look-ups."""

    def __init__(self, calls: Mapping[str, Any], count: list[int]) -> None:
        self._calls, self._count = calls, count

    def __getitem__(self, key: str) -> Any:
        self._count[0] += 1
        return self._calls[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._calls)

    def __len__(self) -> int:
        return len(self._calls)


def test_a_call_fanout_file_is_refused_at_load_before_anything_runs(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = [0]
    real = _VALIDATE.check_expanded
    monkeypatch.setattr(_VALIDATE, "check_expanded", lambda calls, sizes: real(_Lookups(calls, lookups), sizes))
    path = tmp_path / "m.ir.json"
    path.write_text(json.dumps(_document(fanout(10))))
    assert len(IR.load(path)) == 10  # 2**9 calls of a 3-node graph: fine
    assert 10 <= lookups[0] <= 4 * 10  # each implementation's callees read a bounded number of times
    path.write_text(json.dumps(_document(fanout(40))))
    assert path.stat().st_size < 40_000
    lookups[0] = 0
    with pytest.raises(ResourceBudgetError, match=f"more than {MAX_EXPANDED_NODES} graph nodes") as info:
        IR.load(path)
    assert info.value.implementation is not None
    assert lookups[0] <= 4 * 40  # counted bottom-up, once per implementation: the 2**39 calls never expanded
    with pytest.raises(ResourceBudgetError):
        ir2torch.convert(fanout(40))
    with pytest.raises(ResourceBudgetError):  # 4000 x 4000 calls of one leaf: a fan-out in two levels
        IR.from_dict(fanout(3, calls=4000)).validate()


def _document(impls: dict) -> dict:
    """The JSON document of ``impls`` (edges as lists, as files hold them)."""
    return {"format": "torch2ir.ir", "format_version": 1, "implementations": {
        k: {**v, "edges": [dict(e) for e in v["edges"].values()]} for k, v in impls.items()}}


def test_real_models_are_far_below_the_bound() -> None:
    model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
    ir = torch2ir.convert(model, (x,))
    ir.validate()
    assert torch.equal(ir2torch.convert(ir, model.state_dict())(x), model(x))
