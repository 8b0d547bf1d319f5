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
from common.values import Ref, decode

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
    # 768 values and 96 objects allowed: refused before parsing (its values counted) or by the parser long before
    # the file's end (its objects counted)
    with pytest.raises(errors.IRFormatError, match="JSON (values|objects)") as info:
        IR.load(path, max_nodes=3)
    assert info.value.key == str(path) and "max_nodes=" in (info.value.hint or "")
    with pytest.raises(errors.IRFormatError, match="JSON (values|objects)"):
        loads_json(path.read_text(), max_nodes=3)
    assert len(json.loads(path.read_text())["implementations"]) == 101


def test_values_of_every_kind_count_before_parsing() -> None:
    """Arrays and scalars count, not only objects: a 90 MB file of empty arrays once cost 2 GB before its objects
    did (issue 50); every value is counted from the text before any is built."""
    with pytest.raises(errors.IRFormatError, match="JSON values"):
        loads_json("[" + ", ".join(["[]"] * 300) + "]", max_nodes=1)  # 301 values, 256 allowed, no object
    with pytest.raises(errors.IRFormatError, match="JSON values"):
        loads_json("[" + ", ".join(["0"] * 300) + "]", max_nodes=1)
    assert loads_json("[" + ", ".join(["0"] * 100) + "]", max_nodes=1) == [0] * 100
    with pytest.raises(errors.IRFormatError, match="JSON objects"):  # within the values, over the objects
        loads_json("[" + ", ".join(["{}"] * 50) + "]", max_nodes=1)  # 101 values counted, 50 objects


def test_dense_containers_are_refused_before_parsing() -> None:
    from common.json_files import DENSE_FROM

    dense = b"[" + b"[]," * (DENSE_FROM // 3) + b"[]]"
    with pytest.raises(errors.IRFormatError, match="arrays and objects in"):
        loads_json(dense)
    sparse = b"[" + b'"' + b"x" * DENSE_FROM + b'"' + b"]"  # brackets inside a string are no containers
    assert len(loads_json(sparse.replace(b"x" * 8, b"[{]}[{]}", 1000))[0]) == DENSE_FROM


def test_higher_order_bodies_count_in_the_node_budget() -> None:
    """Nodes inside a higher-order op's ``$graph`` count: 5000 of them once loaded under ``max_nodes=1000``."""
    body = {"name": "body", "type": "module",
            "nodes": {f"n{i}": {"name": f"n{i}", "type": "input", "implementation": "input"} for i in range(40)},
            "edges": []}
    node = {"name": "cond", "type": "function", "implementation": "higher_order.cond",
            "args": [True, {"$graph": body}, {"$graph": {**body, "name": "b2"}}, []]}
    root = {"name": "root", "type": "module", "nodes": {"cond": node}, "edges": []}
    with pytest.raises(errors.IRFormatError, match="more than 50 nodes") as info:
        IR.from_dict({"root": root}, max_nodes=50, value_fn=decode)
    assert "$graph" in info.value.key


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
    original = validate_module.check_args

    def counting(*args: Any) -> Any:
        checked[0] += 1
        return original(*args)

    monkeypatch.setattr(validate_module, "check_args", counting)
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
    root.add_node("output", "output", "output", args=[Ref("w")])
    root.add_edge("w", "output", slot=0)
    validate_module.validate(ir)
    root.node("w")["implementation"] = "shared.bias"
    with pytest.raises(errors.MissingImplementationError, match="shared.bias"):
        validate_module.validate(ir)


def test_a_file_whose_format_is_not_its_first_key_is_parsed_within_the_budget(tmp_path: Path, monkeypatch) -> None:
    """``ir2torch.convert(path)`` tells an IR from a FlatIR by the file's header; a document not starting with its
    ``format`` is parsed whole for it, within the loaders' default budget (once with no budget at all)."""
    import common.flat_files

    doc = many_implementations(100)
    reordered = {k: v for k, v in doc.items() if k != "format"} | {"format": doc["format"]}
    path = _write(reordered, tmp_path)
    monkeypatch.setattr(common.flat_files, "DEFAULT_MAX_NODES", 3)
    with pytest.raises(errors.IRFormatError, match="JSON (values|objects)"):
        ir2torch.convert(path)


def test_a_dense_file_is_refused_within_a_few_times_its_size(tmp_path: Path) -> None:
    """A 30 MB file of empty arrays (20 times its size in memory once parsed, and counted only as objects were)
    is refused before it is parsed, the scan of its structure costing a few times the file's size: measured
    in a child process, whose peak resident memory is its own."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "dense.ir.json"
    with path.open("wb") as f:
        f.write(b'{"format": "torch2ir.ir", "format_version": 1, "implementations": {"root": {"name": "root", '
                b'"type": "module", "nodes": {}, "edges": [], "x": [' + b"[]," * 10_000_000 + b"[]]}}}")
    script = textwrap.dedent(f"""
        import resource, sys
        from common import IR
        from common.errors import IRFormatError
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            IR.load({str(path)!r})
        except IRFormatError as exc:
            print(exc.message[:200])
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    """)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    message, grown = done.stdout.strip().splitlines()
    assert "arrays and objects in" in message
    assert int(grown) < 5 * path.stat().st_size
