"""Parsing, validation and files of :class:`~common.flat.FlatIR` (its schema, kept apart from the data model).

File layout (see ``docs/ir-spec.md``)::

    {"format": "torch2ir.flat", "format_version": 1, "meta": {...}, "graph_inputs": [...], ...,
     "nodes": [...], "tensors": {"file": "model.flat.tensors.<sha256[:16]>.safetensors", "sha256": ...,
                                 "keys": [...]}}

The JSON rules are those of :mod:`common.json_files` (as for IR files): strict parsing, tagged values, deterministic
bytes, atomic writes, tensors in a content-addressed ``.safetensors`` file beside the JSON, saved
and loaded as one unit. Loading validates before returning: every op name must be on the
allow-list (or be accepted explicitly), and nothing named in the document is imported or called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ArgumentMismatchError, DanglingEdgeError, IRFormatError, IRValidationError, UnsafeTargetError
from .flat import WEIGHT_KINDS, FlatNode, ValueMeta, WeightMeta
from .names import check_attr_path, check_forward_arg_names, check_identifier
from .op_args import COUNT_HINT, count_problem, enum_problem
from .safety import DEFAULT_ALLOWLIST, PYTHON_FUNCTIONS, Allowlist
from .schema import DEFAULT_MAX_NODES, MAX_GRAPH_NODES, ValueFn, budget_error, check_max_nodes, expect
from .treespec import kwarg_names, load_spec
from .values import dtype_from_name, dtype_name

FLAT_FORMAT = "torch2ir.flat"
#: Version written by this library; files of versions 1..FLAT_FORMAT_VERSION are read.
FLAT_FORMAT_VERSION = 1

_BODY_KEYS = ("meta", "graph_inputs", "graph_outputs", "in_spec", "out_spec", "forward_arg_names",
              "range_constraints", "weights", "weight_name_mapping", "nodes", "same_inputs")  # fmt: skip
_NODE_KEYS = {"name", "op_type", "module_path", "args", "kwargs", "inputs", "outputs", "source"}


# -- parsing -------------------------------------------------------------------------------
def _fields(d: Any, allowed: set[str], required: set[str], where: str, node: str | None = None) -> Mapping[str, Any]:
    expect(d, Mapping, where)
    unknown = set(d) - allowed
    if unknown:
        raise IRFormatError(f"unknown fields {sorted(unknown)}", node=node, key=where,
                            hint=f"allowed fields: {', '.join(sorted(allowed))}")
    missing = required - set(d)
    if missing:
        raise IRFormatError(f"missing fields {sorted(missing)}", node=node, key=where)
    return d


def _name(value: Any, where: str, node: str | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise IRFormatError(f"expected a non-empty name, got {value!r}", node=node, key=where)
    return value


def _shape(value: Any, where: str, node: str | None = None) -> list[int | str]:
    ok = isinstance(value, list) and all(
        (isinstance(s, int) and not isinstance(s, bool) and s >= 0) or (isinstance(s, str) and s) for s in value
    )
    if not ok:
        raise IRFormatError(f"shape must be a list of sizes (ints, or symbols as strings), got {value!r}",
                            node=node, key=where)
    return list(value)


def _dtype(value: Any, where: str) -> str:
    dtype_from_name(value, where=where)  # refuses unknown names
    return value


def parse_value(d: Any, value_fn: ValueFn, where: str, node: str | None = None) -> ValueMeta:
    """A :class:`ValueMeta` from ``{"name", "shape", "dtype"}``, ``{"name", "sym"}`` or ``{"name", "value"}``."""
    expect(d, Mapping, where)
    name = _name(d.get("name"), f"{where}.name", node)
    if "shape" in d or "dtype" in d:
        _fields(d, {"name", "shape", "dtype"}, {"name", "shape", "dtype"}, where, node)
        return ValueMeta.tensor(name, _shape(d["shape"], f"{where}.shape", node), _dtype(d["dtype"], f"{where}.dtype"))
    if "sym" in d:
        _fields(d, {"name", "sym"}, {"name", "sym"}, where, node)
        if not isinstance(d["sym"], str) or not d["sym"]:
            raise IRFormatError("'sym' must be a non-empty expression string", node=node, key=f"{where}.sym")
        return ValueMeta(name, "symbol", sym=d["sym"])
    _fields(d, {"name", "value"}, {"name", "value"}, where, node)
    return ValueMeta(name, "constant", value=value_fn(d["value"], f"{where}.value"))


def _parse_weight(d: Any, where: str) -> WeightMeta:
    _fields(d, {"name", "kind", "shape", "dtype", "requires_grad", "persistent"}, {"name", "kind", "shape", "dtype"},
            where)
    if d["kind"] not in WEIGHT_KINDS:
        raise IRFormatError(f"weight kind {d['kind']!r} is not one of {WEIGHT_KINDS}", key=f"{where}.kind")
    for flag in ("requires_grad", "persistent"):
        if flag in d and not isinstance(d[flag], bool):
            raise IRFormatError(f"'{flag}' must be a boolean", key=f"{where}.{flag}")
    return WeightMeta(_name(d["name"], f"{where}.name"), d["kind"], _shape(d["shape"], f"{where}.shape"),
                      _dtype(d["dtype"], f"{where}.dtype"), d.get("requires_grad"), d.get("persistent"))


def _parse_node(d: Any, value_fn: ValueFn, where: str) -> FlatNode:
    expect(d, Mapping, where)
    name = _name(d.get("name"), f"{where}.name")
    _fields(d, _NODE_KEYS, {"name", "op_type"}, where, name)
    op_type = d["op_type"]
    if not isinstance(op_type, str):
        raise IRFormatError(f"op_type must be a string, got {type(op_type).__name__}", node=name,
                            key=f"{where}.op_type")
    module_path = d.get("module_path", "root")
    if not isinstance(module_path, str) or not module_path:
        raise IRFormatError("module_path must be a non-empty string ('root' for the model itself)", node=name)
    args, kwargs = d.get("args", {}), d.get("kwargs", {})
    expect(args, Mapping, f"{where}.args")
    expect(kwargs, Mapping, f"{where}.kwargs")
    values = {}
    for part, raw in (("inputs", d.get("inputs", [])), ("outputs", d.get("outputs", []))):
        expect(raw, list, f"{where}.{part}")
        values[part] = [parse_value(v, value_fn, f"{where}.{part}[{i}]", name) for i, v in enumerate(raw)]
    return FlatNode(
        name, op_type,
        {str(k): value_fn(v, f"{where}.args.{k}") for k, v in args.items()},
        {str(k): value_fn(v, f"{where}.kwargs.{k}") for k, v in kwargs.items()},
        values["inputs"], values["outputs"], module_path, _source(d.get("source"), f"{where}.source", name),
    )  # fmt: skip


def _source(value: Any, where: str, node: str) -> tuple | None:
    """``[implementation, node]`` or ``[implementation, node, variant >= 1]`` (data: never a name of code)."""
    if value is None:
        return None
    ok = isinstance(value, list) and len(value) in (2, 3) and all(isinstance(v, str) and v for v in value[:2])
    if ok and len(value) == 3:
        ok = isinstance(value[2], int) and not isinstance(value[2], bool) and 1 <= value[2] <= MAX_GRAPH_NODES
    if not ok:
        raise IRFormatError(f"source must be [implementation, node] or [implementation, node, variant >= 1], got "
                            f"{str(value)[:80]}", node=node, key=where,
                            hint="it names the module-level IR node the op was lowered from; drop it if unknown")
    return tuple(value)


def parse_flat(cls: type, d: Any, value_fn: ValueFn, max_nodes: int | None = DEFAULT_MAX_NODES) -> Any:
    """Build a ``cls`` (:class:`~common.flat.FlatIR`) from its plain-dict form (``max_nodes``: see
    :meth:`FlatIR.from_dict <common.flat.FlatIR.from_dict>`)."""
    _fields(d, set(_BODY_KEYS), {"nodes"}, "document")
    check_max_nodes(max_nodes)
    lists = {}
    total = 0
    for key in ("graph_inputs", "graph_outputs", "weights", "nodes", "forward_arg_names"):
        expect(d.get(key, []), list, key)
        lists[key] = d.get(key, [])
        total += len(lists[key])
        if max_nodes is not None and total > max_nodes:
            raise budget_error("entries in its lists", total, max_nodes, max_nodes, key=key)
    for key in ("meta", "range_constraints", "weight_name_mapping", "same_inputs"):
        expect(d.get(key, {}), Mapping, key)
    for key in ("in_spec", "out_spec"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise IRFormatError(f"'{key}' must be a pytree spec string (treespec_dumps) or null", key=key)
    if not all(isinstance(n, str) for n in lists["forward_arg_names"]):
        raise IRFormatError("'forward_arg_names' must be a list of strings", key="forward_arg_names")
    mapping = d.get("weight_name_mapping", {})
    if not all(isinstance(k, str) and isinstance(v, str) and v for k, v in mapping.items()):
        raise IRFormatError("'weight_name_mapping' maps placeholder names to state-dict keys (strings)",
                            key="weight_name_mapping")
    same = d.get("same_inputs", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in same.items()):
        raise IRFormatError("'same_inputs' maps graph input names to graph input names", key="same_inputs")
    ranges = d.get("range_constraints", {})
    for sym, bounds in ranges.items():
        if not (isinstance(bounds, list) and len(bounds) == 2
                and all(isinstance(b, (int, str)) and not isinstance(b, bool) for b in bounds)):
            raise IRFormatError(f"range of {sym!r} must be [min, max] (ints, or 'int_oo')", key="range_constraints")
    return cls(
        [_parse_node(n, value_fn, f"nodes[{i}]") for i, n in enumerate(lists["nodes"])],
        graph_inputs=[parse_value(v, value_fn, f"graph_inputs[{i}]") for i, v in enumerate(lists["graph_inputs"])],
        graph_outputs=[parse_value(v, value_fn, f"graph_outputs[{i}]") for i, v in enumerate(lists["graph_outputs"])],
        weights=[_parse_weight(w, f"weights[{i}]") for i, w in enumerate(lists["weights"])],
        weight_name_mapping=mapping,
        in_spec=d.get("in_spec"),
        out_spec=d.get("out_spec"),
        forward_arg_names=lists["forward_arg_names"],
        range_constraints=ranges,
        meta={str(k): value_fn(v, f"meta.{k}") for k, v in d.get("meta", {}).items()},
        same_inputs=same,
    )


# -- validation ----------------------------------------------------------------------------
def check_op(op_type: str, allow: Allowlist, extra_ops: frozenset[str], node: str) -> None:
    """Refuse an op name that is neither allowed nor accepted explicitly (never imports anything)."""
    if op_type in extra_ops or allow.is_allowed(op_type):
        return
    if allow.refusal(op_type) is not None:
        allow.check(op_type, node=node)  # raises, with the reason the operator is refused
    raise UnsafeTargetError(
        f"op {op_type!r} is not on the allow-list and has no registered executor; it will not be imported or called",
        node=node,
        hint="ATen ops must exist in this torch ('aten.<op>.<overload>'); for another op you trust, register an "
        "executor (converter.executors.register(op_type, fn)) or pass extra_ops= to FlatIR.load",
    )


#: Every string field of a FlatIR that names something in the executed module, with its rule.
FLAT_NAME_FIELDS = {
    "forward_arg_names[]": "identifier (not a name generated code uses)",
    "weight_name_mapping value": "attribute path",
    "nodes[].kwargs key": "identifier",
    "in_spec": "pytree spec, keyword names identifiers",
    "out_spec": "pytree spec",
    "meta.device": "a device torch knows",
    "meta.unread_state[]": "data (compared with state-dict keys, never used as a name)",
}


def check_flat_names(flat: Any) -> None:
    """The names of :data:`FLAT_NAME_FIELDS` follow the rules of :mod:`common.names`.

    Raises:
        UnsafeNameError: naming the field and value.
        IRFormatError: an unreadable spec or device.
    """
    check_forward_arg_names(list(flat.forward_arg_names))
    for name, key in flat.weight_name_mapping.items():
        check_attr_path(key, f"weight_name_mapping[{name!r}]")
    for node in flat.nodes:
        for key in node.kwargs:
            check_identifier(key, "keyword argument", node=node.name)
    if flat.in_spec is not None:
        kwarg_names(load_spec(flat.in_spec, "in_spec"))
    if flat.out_spec is not None:
        load_spec(flat.out_spec, "out_spec")
    unread = flat.meta.get("unread_state")
    if unread is not None and not (isinstance(unread, list) and all(isinstance(k, str) for k in unread)):
        raise IRFormatError("meta.unread_state must be a list of state-dict keys", key="meta.unread_state")
    device = flat.meta.get("device")
    if device is not None:
        import torch

        try:
            torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            raise IRFormatError(f"meta.device {str(device)[:40]!r} is not a device", key="meta.device",
                                hint="use the device the model was lowered on ('meta', 'cpu', ...)") from None


def validate_flat(flat: Any, allowlist: Allowlist | None, extra_ops: frozenset[str]) -> None:
    """Semantic checks of a FlatIR (see :meth:`common.flat.FlatIR.validate`)."""
    allow = allowlist or DEFAULT_ALLOWLIST
    for node in flat.nodes:  # safety first: refuse unknown ops before looking at anything else
        check_op(node.op_type, allow, extra_ops, node.name)
    check_flat_names(flat)
    defined: dict[str, ValueMeta] = {}

    def define(meta: ValueMeta, where: str, node: str | None = None) -> None:
        if meta.name in defined:
            raise IRValidationError(f"value name {meta.name!r} is defined twice", node=node, key=where,
                                    hint="graph inputs, weights and node outputs need distinct names")
        defined[meta.name] = meta

    for meta in flat.graph_inputs:
        define(meta, "graph_inputs")
    order = {m.name: i for i, m in enumerate(flat.graph_inputs)}
    for name, other in flat.same_inputs.items():
        if not order.get(name, -1) > order.get(other, len(order)):
            raise IRValidationError(f"same_inputs maps {str(name)[:80]!r} to {str(other)[:80]!r}: map a graph input "
                                    "to an earlier one", key="same_inputs", hint="fix or remove the entry")
    names = [w.name for w in flat.weights]
    for w in flat.weights:
        define(ValueMeta.tensor(w.name, w.shape, w.dtype), "weights")
    if set(flat.weight_name_mapping) != set(names):
        raise IRValidationError(
            f"weight_name_mapping has keys {sorted(set(flat.weight_name_mapping) ^ set(names))} "
            "that are not weights, or misses weights", key="weight_name_mapping",
            hint="map every weight placeholder name (and only those) to its state-dict key")
    node_names: set[str] = set()
    for node in flat.nodes:
        if node.name in node_names:
            raise IRValidationError("duplicate node name", node=node.name)
        node_names.add(node.name)
        _check_arguments(node, allow, extra_ops)
        refs = node.refs()
        for ref in refs:
            if ref.index is not None:
                raise IRFormatError("a FlatIR reference names a value, never an index into one", node=node.name,
                                    hint=f"use {{'$ref': {ref.node!r}}}; each output of a multi-output op is named")
            if ref.node not in defined:
                raise DanglingEdgeError(f"argument references value {ref.node!r}, which is not defined before it",
                                        node=node.name,
                                        hint="define it as a graph input, a weight or an earlier node's output")
        expected = [defined[r.node] for r in refs]
        if [m.to_dict() for m in node.inputs] != [m.to_dict() for m in expected]:
            raise ArgumentMismatchError(
                f"'inputs' lists {[m.name for m in node.inputs]} but the arguments reference "
                f"{[m.name for m in expected]} (with the metadata of their producers)", node=node.name,
                hint="'inputs' must be the metadata of the referenced values, in argument order")
        for i, meta in enumerate(node.outputs):
            define(meta, f"outputs[{i}]", node.name)
    for meta in flat.graph_outputs:
        if meta.kind != "constant" and meta.name not in defined:
            raise DanglingEdgeError(f"graph output {meta.name!r} is not a defined value", key="graph_outputs")
    by_key = {flat.weight_name_mapping[w.name]: w for w in flat.weights}
    for key, tensor in flat.tensors.items():
        weight = by_key.get(key)
        if weight is None:
            raise IRValidationError(f"tensor {key!r} is not the state key of any weight", key="tensors")
        if list(tensor.shape) != weight.shape or dtype_name(tensor.dtype) != weight.dtype:
            raise IRValidationError(
                f"tensor {key!r} is {dtype_name(tensor.dtype)}{list(tensor.shape)}, "
                f"weight {weight.name!r} is {weight.dtype}{weight.shape}", key="tensors")


def _check_arguments(node: FlatNode, allow: Allowlist, extra_ops: frozenset[str]) -> None:
    op = node.op_type
    if op in PYTHON_FUNCTIONS and op not in extra_ops:
        expected = [f"arg{i}" for i in range(len(node.args))]
        if list(node.args) != expected:
            raise ArgumentMismatchError(f"positional arguments of {op} are named {list(node.args)}",
                                        node=node.name, hint=f"name them {expected}")
        return
    if op in extra_ops or not op.startswith("aten."):
        return
    resolved = allow.resolve(op, node=node.name)
    schema = getattr(resolved, "_schema", None)
    if schema is None:  # an overload packet: no single schema to check against
        return
    known = [a.name for a in schema.arguments]
    for name in [*node.args, *node.kwargs]:
        if name not in known:
            raise ArgumentMismatchError(f"{op} has no argument {name!r}", node=node.name,
                                        hint=f"its schema names {', '.join(known)}")
    problem = enum_problem(resolved, node.args, node.kwargs)
    if problem is not None:
        raise ArgumentMismatchError(f"{op}: {problem}", node=node.name,
                                    hint='write the value as {"$dtype": "float32"} (or "$layout", "$memory_format"), '
                                         "as torch2ir does")
    problem = count_problem(resolved, node.args, node.kwargs)
    if problem is not None:
        raise ArgumentMismatchError(f"{op}: {problem}", node=node.name, hint=COUNT_HINT)


__all__ = ["FLAT_FORMAT", "FLAT_FORMAT_VERSION", "FLAT_NAME_FIELDS", "check_flat_names", "check_op", "parse_flat",
           "parse_value", "validate_flat"]
