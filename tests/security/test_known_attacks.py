"""Every class of attack found against 399138d, each as a crafted document, with the error it now gets.

Each case edits a real saved document (the zoo's ``kwargs`` model, or its FlatIR) and names the
IRError subclass that must come out of load, rebuild (meta and CPU) or the first forward, and a
fragment of its message. Nothing may run: a marker file would appear if a payload executed.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ir2torch
import torch2ir
from common import IR
from common import errors as E
from common.safety import DEFAULT_ALLOWLIST
from tests.security.corpus import Document, attempt, documents, write

MARKER = "ATTACK_MARKER"
RUN = f"open('{MARKER}','w')"


def _doc(tmp: str, name: str, kind: str = "ir") -> Document:
    return next(d for d in documents(tmp) if d.name == name and d.kind == kind)


def _root(doc: dict) -> dict:
    return doc["implementations"]["root"]


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _set_arg(value: Any) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        _root(doc)["nodes"]["mul"]["args"].append(value)
    return edit


def _rename_key(old: str, new: str) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        impls = doc["implementations"]
        impls[new] = impls.pop(old)
        impls[new]["name"] = new
        for node in _root(doc)["nodes"].values():
            if node.get("implementation") == old:
                node["implementation"] = new
    return edit


def _params(edit: Callable[[list], None]) -> Callable[[dict], None]:
    def apply(doc: dict) -> None:
        edit(doc["implementations"]["block"]["meta"]["parameters"])
    return apply


# (id, document, edit, error class, message fragment)
IR_CASES: list[tuple[str, str, Callable[[dict], None], type, str]] = [
    ("parameter name with code", "signed", _params(lambda p: p[0].__setitem__(0, f"z={RUN}")), E.UnsafeNameError,
     "parameters"),
    ("parameter kind var_keyword", "signed", _params(lambda p: p[0].__setitem__(1, "var_keyword")),
     E.IRFormatError, "unknown kind"),
    ("keyword-only before positional", "signed", _params(lambda p: p.insert(0, p.pop())), E.IRFormatError,
     "comes after"),
    ("traced parameter dropped", "signed", _params(lambda p: p.pop(0)), E.IRFormatError, "miss a traced"),
    ("untraced parameter without default", "signed", _params(lambda p: p.append(["extra", "keyword_only"])),
     E.IRFormatError, "no default"),
    ("parameter default is a code string", "signed", _params(lambda p: p[2].__setitem__(2, RUN)), None, ""),
    ("parameters not a list", "signed", _params(lambda p: p.clear() or p.append("x")), E.IRFormatError,
     "is not [name, kind]"),
    ("forward_arg_names default", "kwargs",
     lambda d: _root(d)["meta"]["forward_arg_names"].append(f"z={RUN}"), E.UnsafeNameError, "forward_arg_names"),
    ("in_spec keyword key", "kwargs",
     lambda d: _root(d)["meta"].__setitem__("in_spec", _root(d)["meta"]["in_spec"].replace(
         'scale', f"scale':{RUN},'x")), E.UnsafeNameError, "keyword argument"),
    ("in_spec imports a module (defaultdict)", "kwargs",
     lambda d: _root(d)["meta"].__setitem__("in_spec", json.dumps([1, {
         "type": "collections.defaultdict", "context": json.dumps({
             "default_factory_module": "antigravity", "default_factory_name": "x", "dict_context": []}),
         "children_spec": []}])), E.IRFormatError, "defaultdict"),
    ("in_spec imports a module (enum)", "kwargs",
     lambda d: _root(d)["meta"].__setitem__("in_spec", json.dumps([1, {
         "type": "builtins.dict", "context": json.dumps([{"__enum__": True, "fqn": "os:environ", "name": "HOME"}]),
         "children_spec": [{"type": None, "context": None, "children_spec": []}]}])), E.IRFormatError, "enum"),
    ("kwargs key of a function node", "kwargs",
     lambda d: _root(d)["nodes"]["add"]["kwargs"].__setitem__(f"alpha={RUN},y", 1), E.UnsafeNameError,
     "keyword argument"),
    ("get_attr target", "buffers",
     lambda d: next(n for n in _root(d)["nodes"].values() if n["type"] == "get_attr").__setitem__(
         "implementation", f'x"),{RUN},getattr(self,"y'), E.UnsafeNameError, "get_attr target"),
    ("call node target", "kwargs",
     lambda d: _root(d)["nodes"]["lin"].__setitem__("target", f'x"),{RUN},getattr(self,"y'), E.UnsafeNameError,
     "call target"),
    ("implementation key", "kwargs", _rename_key("lin", f'lin"),{RUN},getattr(self,"y'), E.UnsafeNameError,
     "implementation key"),
    ("aten.__init__", "kwargs", lambda d: _root(d)["nodes"]["add"].__setitem__("implementation", "aten.__init__"),
     E.UnsafeTargetError, "aten.__init__"),
    ("aten.name", "kwargs", lambda d: _root(d)["nodes"]["add"].__setitem__("implementation", "aten.name"),
     E.UnsafeTargetError, "aten.name"),
    ("node field 'self'", "kwargs", lambda d: _root(d)["nodes"]["add"].__setitem__("self", 1), None, ""),
    ("node field 'node_for_adding'", "kwargs",
     lambda d: _root(d)["nodes"]["add"].__setitem__("node_for_adding", 1), None, ""),
    ("$complex overflow", "kwargs", _set_arg({"$complex": [10**400, 0]}), E.IRFormatError, "does not fit a float"),
    ("$size overflow", "kwargs", _set_arg({"$size": [2**64]}), E.IRFormatError, "$size takes"),
    ("$size of floats", "kwargs", _set_arg({"$size": [1.5]}), E.IRFormatError, "$size takes"),
    ("600-deep list", "kwargs", _set_arg(_nested(600)), E.IRFormatError, "nests arrays and objects"),
    ("300-deep list", "kwargs", _set_arg(_nested(300)), E.IRFormatError, "nests arrays and objects"),
    ("$device cuda", "kwargs", _set_arg({"$device": "cuda"}), E.ExecutionError, "node 'mul'"),
    ("unknown constructor argument", "kwargs", lambda d: d["implementations"]["lin"].__setitem__("flavour", 1),
     E.BuildError, "flavour"),
    ("implementation key 'training'", "kwargs", _rename_key("lin", "training"), E.UnsafeNameError, "training"),
    ("implementation key 'forward'", "kwargs", _rename_key("lin", "forward"), E.UnsafeNameError, "forward"),
    ("implementation key '__init__'", "kwargs", _rename_key("lin", "__init__"), E.UnsafeNameError, "__init__"),
    ("state name 'forward'", "kwargs", lambda d: d["implementations"]["lin"]["state"].__setitem__(
        "forward", d["implementations"]["lin"]["state"].pop("weight")), E.UnsafeNameError, "forward"),
    ("alias 'training'", "kwargs", lambda d: d["implementations"]["lin"].__setitem__("aliases", ["training"]),
     E.UnsafeNameError, "training"),
    ("root alias", "kwargs", lambda d: _root(d).__setitem__("aliases", ["again"]), E.CycleError, "root"),
    ("alias inside itself", "kwargs", lambda d: d["implementations"]["lin"].__setitem__("aliases", ["lin.me"]),
     E.CycleError, "inside itself"),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("attacks"))


def _run(document: Document, doc: dict, folder: Path) -> tuple[str, str]:
    try:
        return attempt(write(document, doc, folder), document), ""
    except E.IRError as exc:  # attempt() returns the name; keep the message for the assertion too
        return type(exc).__name__, str(exc)


def _message(document: Document, doc: dict, folder: Path) -> str:
    """The message of the IRError the document gets, or "" when it runs."""
    import ir2torch

    path = write(document, doc, folder)
    try:
        loaded = IR.load(path) if document.kind == "ir" else __import__("common").FlatIR.load(path)
        ir2torch.convert(copy.deepcopy(loaded), device="meta")
        with torch.no_grad():
            ir2torch.convert(loaded)(*document.args, **document.kwargs)
    except E.IRError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


@pytest.mark.parametrize(("name", "model", "edit", "error", "fragment"), IR_CASES, ids=[c[0] for c in IR_CASES])
def test_known_attack_gets_its_error(name: str, model: str, edit: Callable[[dict], None], error: type | None,
                                     fragment: str, tmp: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    document = _doc(tmp, model)
    doc = copy.deepcopy(document.doc)
    edit(doc)
    outcome = attempt(write(document, doc, tmp_path / "a"), document)
    assert not (tmp_path / MARKER).exists()
    if error is None:  # stored as data: the model still rebuilds and runs
        assert outcome == "ok"
        return
    message = _message(document, doc, tmp_path / "b")
    assert message.startswith(f"{error.__name__}:") or isinstance(_error_of(message), error), message
    assert fragment in message


def _error_of(message: str) -> Any:
    return getattr(E, message.split(":", 1)[0], None) and getattr(E, message.split(":", 1)[0])(message)


FLAT_CASES: list[tuple[str, Callable[[dict], None], type, str]] = [
    ("forward_arg_names default", lambda d: d["forward_arg_names"].append(f"z={RUN}"), E.UnsafeNameError,
     "forward_arg_names"),
    ("weight_name_mapping value", lambda d: d["weight_name_mapping"].__setitem__(
        next(iter(d["weight_name_mapping"])), f'x"),{RUN},getattr(self,"y'), E.UnsafeNameError, "weight_name_mapping"),
    ("keyword of a schema-less op", lambda d: d["nodes"].append({
        "name": "extra", "op_type": "operator.add", "args": {"arg0": 1, "arg1": 2},
        "kwargs": {f"x={RUN},y": 1}, "outputs": [{"name": "extra_out", "value": 3}]}), E.UnsafeNameError,
     "keyword argument"),
    ("meta.device disk", lambda d: d["meta"].__setitem__("device", "disk"), E.IRFormatError, "meta.device"),
    ("in_spec keyword key", lambda d: d.__setitem__("in_spec", d["in_spec"].replace("scale", f"scale':{RUN},'x")),
     E.UnsafeNameError, "keyword argument"),
]


@pytest.mark.parametrize(("name", "edit", "error", "fragment"), FLAT_CASES, ids=[c[0] for c in FLAT_CASES])
def test_known_flat_attack_gets_its_error(name: str, edit: Callable[[dict], None], error: type, fragment: str,
                                          tmp: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    document = _doc(tmp, "kwargs", "flat")
    doc = copy.deepcopy(document.doc)
    edit(doc)
    outcome = attempt(write(document, doc, tmp_path / "a"), document)
    assert not (tmp_path / MARKER).exists()
    assert outcome == error.__name__
    assert fragment in _message(document, doc, tmp_path / "b")


@pytest.mark.parametrize("name", ["aten.__init__", "aten.__setattr__", "aten.__dict__", "aten.name",
                                  "aten.add.__call__", "aten.add.overloads", "aten.__class__"])
def test_allowlist_resolves_operators_only(name: str) -> None:
    assert not DEFAULT_ALLOWLIST.is_allowed(name)
    with pytest.raises(E.UnsafeTargetError, match="not an ATen operator"):
        DEFAULT_ALLOWLIST.resolve(name)


@pytest.mark.parametrize("name", ["aten.add.Tensor", "aten.__and__.Tensor", "aten._to_copy.default", "aten.relu"])
def test_allowlist_still_resolves_real_operators(name: str) -> None:
    if name == "aten.relu":  # a packet stands for every overload, outside the default surface: opted in
        with pytest.raises(E.OperatorSurfaceError, match=r"allow=\['aten::relu'\]"):
            DEFAULT_ALLOWLIST.resolve(name)
    op = DEFAULT_ALLOWLIST.extended(["aten::relu"]).resolve(name)
    assert isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


def test_graph_size_is_bounded(tmp: str, tmp_path: Path) -> None:
    document = _doc(tmp, "kwargs")
    with pytest.raises(E.IRFormatError, match="more than 3 nodes"):
        IR.load(write(document, copy.deepcopy(document.doc), tmp_path), max_nodes=3)


def _wide(n: int, path: Path) -> Path:
    """A graph with ``n`` slotless edges from ``a`` into one node, one from ``b`` in between."""
    nodes = {"a": {"name": "a", "type": "input", "implementation": "input"},
             "b": {"name": "b", "type": "input", "implementation": "input"},
             "cat": {"name": "cat", "type": "function", "implementation": "aten.add.Tensor"},
             "output": {"name": "output", "type": "output", "implementation": "output"}}
    edges = ([{"src": "a", "dst": "cat"}, {"src": "b", "dst": "cat"}] + [{"src": "a", "dst": "cat"}] * (n - 1)
             + [{"src": "cat", "dst": "output"}])
    doc = {"format": "torch2ir.ir", "format_version": 1,
           "implementations": {"root": {"name": "root", "type": "module", "nodes": nodes, "edges": edges}}}
    path.write_text(json.dumps(doc))
    return path


def _python_calls(load: Any) -> int:
    """The Python and C function calls and returns ``load()`` makes (``sys.setprofile`` events): a count of its
    work that machine load does not change. It does not see a scan inside one frame (``x in a_list`` is one
    bytecode): ``common.validate_calls.check_args`` had one (20 000 edges loaded in 7-9 s, found by
    ``benchmarks/refusals.py``, which times this load)."""
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        count[0] += 1

    sys.setprofile(profile)
    try:
        load()
    finally:
        sys.setprofile(None)
    return count[0]


def test_many_parallel_slotless_edges_load_in_linear_time(tmp_path: Path) -> None:
    """20 000 slotless edges from one node, one from another in between: slots assigned without a quadratic scan
    (which took minutes here): twice the edges cost at most a little more than twice the calls (the quadratic scan
    made 4x as many)."""
    n = 20_000
    ir = IR.load(_wide(n, tmp_path / "wide.ir.json"))
    slots = {src: [] for src in "ab"}
    for src, _, data in ir.root.in_edges("cat"):
        slots[src].append(data["slot"])
    assert slots["b"] == [1] and sorted(slots["a"]) == [0, *range(2, n + 1)]
    paths = [_wide(k, tmp_path / f"{k}.ir.json") for k in (1000, 2000)]
    small, large = (_python_calls(lambda p=p: IR.load(p)) for p in paths)
    assert large < 2.2 * small, (small, large)


@pytest.mark.parametrize("ops", [f"x={RUN}", [f'x"),{RUN},getattr(self,"y'], [1, 2], ["os.system"], ["aten.__init__"],
                                 ["import_module.os.default"], ["x"] * 20_000])
def test_hostile_required_ops_field_is_refused(ops: Any, tmp: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The top-level ``ops`` list (operators a file needs) is data: checked against the allow-list, never run."""
    monkeypatch.chdir(tmp_path)
    for kind in ("ir", "flat"):
        document = _doc(tmp, "kwargs", kind)
        doc = copy.deepcopy(document.doc)
        doc["ops"] = ops
        outcome = attempt(write(document, doc, tmp_path / kind), document)
        assert outcome in ("IRFormatError", "UnsafeTargetError"), outcome
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("unread", [f"x={RUN}", [f'x"),{RUN},getattr(self,"y'], [1], {"a": 1}, ["forward", "__init__"]])
def test_hostile_unread_state_field_is_data(unread: Any, tmp: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """FlatIR ``meta.unread_state`` (state keys the graph does not read) is compared with keys, never run or used
    as a name: a malformed one is an IRFormatError, strings load and run as plain data."""
    monkeypatch.chdir(tmp_path)
    document = _doc(tmp, "kwargs", "flat")
    doc = copy.deepcopy(document.doc)
    doc["meta"]["unread_state"] = unread
    outcome = attempt(write(document, doc, tmp_path / "f"), document)
    well_formed = isinstance(unread, list) and all(isinstance(k, str) for k in unread)
    assert outcome == ("ok" if well_formed else "IRFormatError"), outcome
    assert not (tmp_path / MARKER).exists()


@pytest.mark.parametrize("source", [f"x={RUN}", [f'x"),{RUN},getattr(self,"y', "n"], ["root"], ["a", "b", "c", "d"],
                                    ["root", ""], [1, "n"], ["root", "n", 0], ["root", "n", True], ["root", "n", -1],
                                    ["root", "n", 10**30], ["root", "n", "1"], {"implementation": "root"},
                                    ["forward", "__init__"], ["root", f"n={RUN}", 2]])
def test_hostile_source_field_is_data(source: Any, tmp: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlatIR ``nodes[].source`` (the module-level IR node an op was lowered from) is data, never a name of
    code: a malformed one is an IRFormatError naming the node, strings load and run as plain data."""
    monkeypatch.chdir(tmp_path)
    document = _doc(tmp, "kwargs", "flat")
    doc = copy.deepcopy(document.doc)
    assert all("source" in n for n in doc["nodes"])  # the attacked document carries the field
    doc["nodes"][0]["source"] = source
    outcome = attempt(write(document, doc, tmp_path / "f"), document)
    well_formed = isinstance(source, list) and len(source) in (2, 3) and all(
        isinstance(s, str) and s for s in source[:2]) and (len(source) == 2 or (
            type(source[2]) is int and 1 <= source[2] <= 1_000_000))
    assert outcome == ("ok" if well_formed else "IRFormatError"), outcome
    if not well_formed:
        assert doc["nodes"][0]["name"] in _message(document, doc, tmp_path / "b")
    assert not (tmp_path / MARKER).exists()


def test_a_null_children_order_reads_as_absent(tmp_path: Path) -> None:
    """``meta.children: null`` (found by the fuzz: validation read it as absent, the rebuild iterated it): rebuilt
    as without it."""
    model, x = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.randn(2, 4)
    path = torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json")
    doc = json.loads(path.read_text())
    doc["implementations"]["root"].setdefault("meta", {})["children"] = None
    path.write_text(json.dumps(doc))
    assert torch.equal(ir2torch.convert(path, model.state_dict())(x), model(x))
