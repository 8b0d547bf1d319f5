"""The node budget of a document (``max_nodes=``): counted across all graphs, variants and implementations,
checked before anything is built, and loading stays linear in the document's size."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ir2torch
from benchmarks.large_files import many_implementations, many_variants
from common import IR, errors, schema
from common.flat import FlatIR
from common.ir import Implementation
from common.json_files import dumps, loads_json

validate_module = importlib.import_module("common.validate")  # the package exports the function of that name


def _write(doc: dict[str, Any], tmp_path: Path, name: str = "doc.ir.json") -> Path:
    path = tmp_path / name
    path.write_text(dumps(doc), encoding="utf-8")
    return path


def _nodes(doc: dict[str, Any]) -> int:
    return sum(len(d["nodes"]) + sum(len(v["nodes"]) for v in d.get("variants", []))
               for d in doc["implementations"].values())


def test_default_budget_leaves_a_margin_over_real_models() -> None:
    # an 80-layer Llama with Llama-3-70B dimensions has about 8 300 nodes
    assert schema.DEFAULT_MAX_NODES >= 100 * 8_300


def test_over_budget_is_refused_before_any_graph_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = many_implementations(30)
    total = _nodes(doc)
    path = _write(doc, tmp_path)
    built: list[str] = []
    original = Implementation.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type, key: str, *args: Any, **kwargs: Any) -> Implementation:
        built.append(key)
        return original(cls, key, *args, **kwargs)

    monkeypatch.setattr(Implementation, "from_dict", classmethod(counting))
    with pytest.raises(errors.IRFormatError) as info:
        IR.load(path, max_nodes=total - 1)
    assert not built  # counted from the parsed document, before any implementation was parsed
    err = info.value
    assert err.key is not None and err.key.startswith("implementations[") and err.key.endswith(".nodes")
    assert f"max_nodes={total - 1}" in str(err) and "max_nodes=" in (err.hint or "")
    ir = IR.load(path, max_nodes=total)  # the same document, with the limit raised
    assert len(ir) == 31 and built
    assert len(IR.load(path, max_nodes=None)) == 31


def test_budget_counts_every_variant(tmp_path: Path) -> None:
    n = 50
    doc = many_variants(2, n)  # the main graph and two variants of n relu nodes (+ input and output) each
    graph = n + 2
    root = len(doc["implementations"]["root"]["nodes"])
    total = root + 3 * graph
    assert _nodes(doc) == total
    with pytest.raises(errors.IRFormatError, match=r"more than \d+ nodes") as info:
        IR.from_dict(loads_json(dumps(doc))["implementations"], max_nodes=total - 1)
    assert info.value.key == "implementations['block'].variants[1].nodes"  # where the running count passed it
    ir = IR.load(_write(doc, tmp_path), max_nodes=total)
    assert len(ir["block"].variants) == 2
    with pytest.raises(errors.IRFormatError, match="max_nodes"):
        Implementation.from_dict("block", doc["implementations"]["block"], max_nodes=3 * graph - 1)
    assert len(Implementation.from_dict("block", doc["implementations"]["block"], max_nodes=3 * graph).variants) == 2


def test_edges_and_implementations_count_too() -> None:
    doc = many_implementations(6)["implementations"]
    with pytest.raises(errors.IRFormatError, match="implementations"):
        IR.from_dict(doc, max_nodes=6)
    root = doc["root"]
    root["edges"] = root["edges"] * 20  # more edges than 4 per node of the budget
    with pytest.raises(errors.IRFormatError, match="edges") as info:
        IR.from_dict(doc, max_nodes=_nodes({"implementations": doc}))
    assert info.value.key == "implementations['root'].edges"


def test_json_parser_stops_past_the_objects_the_budget_allows(tmp_path: Path) -> None:
    doc = many_implementations(100)
    path = _write(doc, tmp_path)
    with pytest.raises(errors.IRFormatError, match="JSON objects") as info:
        IR.load(path, max_nodes=3)  # 96 objects allowed: the parser stops long before the file's end
    assert info.value.key == str(path) and "max_nodes=" in (info.value.hint or "")
    with pytest.raises(errors.IRFormatError, match="JSON objects"):
        loads_json(path.read_text(), max_nodes=3)
    assert len(json.loads(path.read_text())["implementations"]) == 101


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_nodes_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        IR.from_dict(many_implementations(1)["implementations"], max_nodes=bad)


def test_flat_ir_lists_share_one_budget() -> None:
    class Tiny(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + 1

    import torch2ir

    flat = torch2ir.convert(Tiny(), (torch.randn(2, 3),)).lower()
    d = flat.to_dict()
    total = sum(len(d.get(k, [])) for k in ("graph_inputs", "graph_outputs", "weights", "nodes",
                                            "forward_arg_names"))
    with pytest.raises(errors.IRFormatError, match="max_nodes"):
        FlatIR.from_dict(d, max_nodes=total - 1)
    assert FlatIR.from_dict(d, max_nodes=total) == flat


def test_ten_thousand_implementations_load_and_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No timing: the file loads and rebuilds on meta, and validation checks each node's arguments once."""
    count = 10_000
    doc = many_implementations(count)
    total = _nodes(doc)
    path = _write(doc, tmp_path)
    checked = [0]
    original = validate_module._check_args

    def counting(*args: Any) -> Any:
        checked[0] += 1
        return original(*args)

    monkeypatch.setattr(validate_module, "_check_args", counting)
    ir = IR.load(path)
    assert checked[0] == total  # one check per node: nothing walks the IR again per implementation
    assert len(ir) == count + 1
    model = ir2torch.convert(ir, device="meta")
    assert checked[0] == 2 * total  # convert validates once more
    modules = dict(model.named_children())
    assert len(modules) == count
    assert isinstance(modules["m0"], torch.nn.Linear) and isinstance(modules["m1"], torch.nn.ReLU)
    assert modules["m0"].weight.is_meta
    out = model(torch.zeros(2, 4, device="meta"))
    assert out.shape == (2, 4) and out.is_meta


def test_get_attr_through_an_alias_is_found_and_a_missing_one_refused() -> None:
    ir = IR()
    a = ir.add(Implementation("a", "module", aliases=["shared"],
                              state={"weight": {"kind": "parameter", "shape": [2], "dtype": torch.float32}}))
    assert a.aliases == ["shared"]
    root = ir.add(Implementation("root", "module"))
    root.add_node("w", "get_attr", "shared.weight")
    root.add_node("output", "output", "output", args=[validate_module.Ref("w")])
    root.add_edge("w", "output", slot=0)
    validate_module.validate(ir)
    root.node("w")["implementation"] = "shared.bias"
    with pytest.raises(errors.MissingImplementationError, match="shared.bias"):
        validate_module.validate(ir)
