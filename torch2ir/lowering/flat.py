"""The ATen-level :class:`~common.flat.FlatIR` of an exported program, weight-free.

:mod:`torch2ir.lowering.capture` hands over the program ``torch2ir.convert`` exported (optionally brought by
``run_decompositions`` to the core ATen set, or through a custom table for hardware teams that keep some ops
whole); each ``call_function`` node becomes a :class:`~common.flat.FlatNode`:

- arguments are named by the op schema; tensor (and symbolic) arguments are references to values;
- outputs are named: a multi-output op names each output after the ``getitem`` that reads it, and
  ``getitem`` itself is not a node;
- ``module_path`` is the innermost module of the node's ``nn_module_stack`` that ``named_modules()``
  knows (``"root"`` for the model itself), i.e. a key or alias of the module-level IR;
- a ``wrap_with_set_grad_enabled`` region (a ``torch.no_grad()`` block) is inlined;
- weights are the parameters, buffers and lifted constants the graph reads (unused ones are left out);
- ``source`` is the node of the module-level IR the op came from (see :func:`flat_from_program`).

Everything is read from fake tensors, so a model and inputs on the ``meta`` device lower without
allocating a weight. Constants and non-persistent buffers that have values (a model not on ``meta``)
are kept in ``flat.tensors``: no state dict carries them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from common.errors import ConversionError, IRError, IRSerializationError
from common.flat import FlatIR, FlatNode, ValueMeta, WeightMeta
from common.required_ops import required_ops_error
from common.safety import Allowlist, function_name
from common.values import Ref, dtype_name, encode, iter_refs
from torch2ir.hierarchy.tensormeta import FUNCTORCH_FIX, dim, functorch_problem, range_bound

#: Higher-order ops whose body is inlined (they change only autograd state, irrelevant to the values).
INLINED_HOPS = ("wrap_with_set_grad_enabled",)
_WEIGHT_KINDS = {"PARAMETER": "parameter", "BUFFER": "buffer", "CONSTANT_TENSOR": "constant"}


def flat_from_program(ep: torch.export.ExportedProgram, paths: Iterable[str], meta: Mapping[str, Any], *,
                      links: Mapping[str, tuple] | None = None, base: fx.Graph | None = None) -> FlatIR:
    """The FlatIR of an exported program of a model whose ``named_modules()`` paths are ``paths``.

    ``links`` maps the names of the call nodes of ``base`` (the graph the module-level IR was built from;
    ``ep.graph`` itself when None) to the IR node each came from: the FlatIR nodes' ``source``. When ``ep`` is
    a decomposition of that program, each node is traced back to ``base`` through its ``from_node`` provenance.

    Raises:
        ConversionError: every construct the FlatIR cannot hold, listed together.
    """
    return _Lowering(ep, paths, meta, links, base).run()


class _Literal:
    """A plain value standing where an fx node is expected (an item a higher-order op's body returns as is)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Upstream(Exception):
    """A node's argument comes from a node that could not be lowered (and is reported already)."""


class _Lowering:
    def __init__(self, ep: torch.export.ExportedProgram, paths: Iterable[str], meta: Mapping[str, Any],
                 links: Mapping[str, tuple] | None, base: fx.Graph | None) -> None:
        self.ep = ep
        self.paths = set(paths)
        self.links = links or {}
        self.base_id = id(base) if base is not None and base is not ep.graph else None
        self.flat = FlatIR(meta=meta)
        # fx node -> value name, list of them (multi-output), or _Literal
        self.env: dict[fx.Node, Any] = {}
        self.values: dict[str, ValueMeta] = {}
        self.used = {n.name for n in ep.graph.nodes}
        self.problems: list[str] = []

    # -- names and values ----------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def define(self, meta: ValueMeta) -> ValueMeta:
        self.values[meta.name] = meta
        return meta

    def meta_of(self, name: str, val: Any, where: str) -> ValueMeta:
        if isinstance(val, torch.Tensor):
            return ValueMeta.tensor(name, [dim(s) for s in val.shape], dtype_name(val.dtype))
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ValueMeta(name, "symbol", sym=str(val))
        try:
            return ValueMeta(name, "constant", value=_check_value(val, where))
        except IRError as exc:
            self.problems.append(f"{where}: {exc.message}")
            return ValueMeta(name, "constant")

    # -- the walk ------------------------------------------------------------------------
    def source_of(self, node: fx.Node) -> tuple | None:
        """The module-level IR node ``node`` was lowered from (through its provenance in a decomposed graph)."""
        if self.base_id is None:
            return self.links.get(node.name)
        origins = node.meta.get("from_node")
        while origins:
            origin = origins[0]
            if origin.graph_id == self.base_id:
                return self.links.get(origin.name)
            origins = origin.from_node
        return None

    def run(self) -> FlatIR:
        self.signature()
        self.walk(self.ep.graph_module, prefix=None, parent_path="root", body_origin=None)
        self.outputs()
        if self.problems:
            lines = "\n".join(f"  - {p}" for p in self.problems)
            raise ConversionError(f"{len(self.problems)} construct(s) the FlatIR cannot hold:\n{lines}",
                                  hint="see the list above; each line names its node")
        self.calling_convention()
        return self.flat

    def signature(self) -> None:
        placeholders = {n.name: n for n in self.ep.graph.nodes if n.op == "placeholder"}
        for spec in self.ep.graph_signature.input_specs:
            name = getattr(spec.arg, "name", None)
            node = placeholders.get(name)
            kind = spec.kind.name
            if node is None:
                continue
            self.env[node] = name
            if kind == "USER_INPUT":
                val = node.meta.get("val", getattr(spec.arg, "value", None))
                self.flat.graph_inputs.append(self.define(self.meta_of(name, val, f"input {name!r}")))
            elif kind in _WEIGHT_KINDS:
                if node.users:  # a weight no op reads (e.g. an unused buffer) is no part of the graph
                    self.weight(name, _WEIGHT_KINDS[kind], spec, node.meta["val"])
            else:
                self.problems.append(f"input {name!r}: unsupported input kind {kind}")

    def weight(self, name: str, kind: str, spec: Any, val: torch.Tensor) -> None:
        target = spec.target
        source = self.ep.state_dict.get(target) if kind == "parameter" else None
        weight = WeightMeta(name, kind, [dim(s) for s in val.shape], dtype_name(val.dtype),
                            requires_grad=bool(source.requires_grad) if source is not None else None,
                            persistent=bool(spec.persistent) if kind == "buffer" else None)
        self.flat.weights.append(weight)
        self.flat.weight_name_mapping[name] = target
        self.define(ValueMeta.tensor(name, weight.shape, weight.dtype))
        stored = kind == "constant" or (kind == "buffer" and not spec.persistent)
        value = self.ep.constants.get(target) if stored else None
        if isinstance(value, torch.Tensor) and not value.is_meta:
            self.flat.tensors[target] = value.detach().clone()

    def walk(self, gm: fx.GraphModule, prefix: str | None, parent_path: str, body_origin: tuple | None) -> None:
        """Lower the call_function nodes of ``gm`` (a HOP body when ``prefix`` is set, whose nodes all come from
        the HOP's IR node ``body_origin``)."""
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target is operator.getitem and node.args[0] in self.env:
                source = self.env[node.args[0]]
                if isinstance(source, list) and isinstance(node.args[1], int):
                    self.env[node] = source[node.args[1]]
                    continue
            path = self.module_path(node, parent_path)
            origin = body_origin if prefix else self.source_of(node)
            if isinstance(node.target, torch._ops.HigherOrderOperator):
                self.inline(gm, node, path, origin)
                continue
            self.call(node, self.fresh(f"{prefix}_{node.name}") if prefix else node.name, path, prefix, origin)

    def inline(self, gm: fx.GraphModule, node: fx.Node, path: str, source: tuple | None) -> None:
        name = node.target.name()
        if name not in INLINED_HOPS:
            self.problems.append(f"node {node.name!r}: higher-order op {name!r} is not supported "
                                 f"(supported: {', '.join(INLINED_HOPS)}); try decompose=True")
            return
        body = getattr(gm, node.args[1].target)
        inner = [n for n in body.graph.nodes if n.op == "placeholder"]
        for placeholder, operand in zip(inner, node.args[2:]):
            self.env[placeholder] = self.env[operand] if isinstance(operand, fx.Node) else _Literal(operand)
        self.walk(body, node.name, path, source)
        out = next(n for n in body.graph.nodes if n.op == "output").args[0]
        self.env[node] = [self.env[v] if isinstance(v, fx.Node) else _Literal(v) for v in out]

    def call(self, node: fx.Node, name: str, path: str, prefix: str | None, source: tuple | None) -> None:
        try:
            op_type = function_name(node.target)
        except IRError:
            problem = functorch_problem(node.target)
            if problem is not None:
                if f"{problem} ({FUNCTORCH_FIX})" not in self.problems:
                    self.problems.append(f"{problem} ({FUNCTORCH_FIX})")
                return
            self.problems.append(f"node {node.name!r}: calls {node.target!r}, which is not an ATen op or an "
                                 "allowed function")
            return
        try:
            args, kwargs = self.arguments(node)
        except _Upstream:
            return  # fed by a node already reported: one problem, not a cascade
        except IRError as exc:
            self.problems.append(f"node {node.name!r}: {exc.message}")
            return
        refs = [r for _, r in iter_refs([args, kwargs])]
        flat_node = FlatNode(name, op_type, args, kwargs, [self.values[r.node] for r in refs], [], path, source)
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            names = self.output_names(node, name, len(val), prefix)
            flat_node.outputs = [self.define(self.meta_of(n, v, f"node {node.name!r}")) for n, v in zip(names, val)]
            self.env[node] = names
        elif val is not None:
            flat_node.outputs = [self.define(self.meta_of(name, val, f"node {node.name!r}"))]
            self.env[node] = name
        self.flat.nodes.append(flat_node)

    def output_names(self, node: fx.Node, name: str, count: int, prefix: str | None) -> list[str]:
        """Output ``i`` is named after the first ``getitem(node, i)``, else ``<name>_out<i>``."""
        names: dict[int, str] = {}
        for user in node.users:
            if user.target is operator.getitem and isinstance(user.args[1], int) and user.args[1] not in names:
                names[user.args[1]] = self.fresh(f"{prefix}_{user.name}") if prefix else user.name
        return [names.get(i) or self.fresh(f"{name}_out{i}") for i in range(count)]

    def arguments(self, node: fx.Node) -> tuple[dict[str, Any], dict[str, Any]]:
        """Positional and keyword arguments by schema name (``arg<i>`` without a schema), values as Refs."""
        schema = getattr(node.target, "_schema", None)
        names = [a.name for a in schema.arguments] if schema is not None else []
        args = {}
        for i, value in enumerate(node.args):
            key = names[i] if i < len(names) else f"arg{i}"
            args[key] = _check_value(self.template(value), f"node {node.name!r} argument {key!r}")
        kwargs = {k: _check_value(self.template(v), f"node {node.name!r} argument {k!r}")
                  for k, v in node.kwargs.items()}
        return args, kwargs

    def template(self, value: Any) -> Any:
        if isinstance(value, fx.Node):
            if value not in self.env:
                raise _Upstream(value.name)
            ref = self.env[value]
            if isinstance(ref, _Literal):
                return ref.value
            if isinstance(ref, list):
                raise ConversionError(f"multi-output value {value.name!r} is used whole")
            return Ref(ref)
        if isinstance(value, (list, tuple)):
            items = [self.template(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        if isinstance(value, dict):
            return {k: self.template(v) for k, v in value.items()}
        return value

    def module_path(self, node: fx.Node, default: str) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        for path, _ in reversed(list(stack.values())):
            if path in self.paths:
                return path or "root"
        return default

    def outputs(self) -> None:
        by_name = {n.name: n for n in self.ep.graph.nodes}
        for i, spec in enumerate(self.ep.graph_signature.output_specs):
            kind = spec.kind.name
            if kind != "USER_OUTPUT":
                target = spec.target or getattr(spec.arg, "name", "?")
                self.problems.append(f"output {i}: the forward mutates {target!r} in place ({kind}); "
                                     "the FlatIR holds functional graphs only")
                continue
            name = getattr(spec.arg, "name", None)
            found = self.env.get(by_name[name]) if name in by_name else None
            if isinstance(found, str):
                self.flat.graph_outputs.append(self.values[found])
                continue
            value = found.value if isinstance(found, _Literal) else getattr(spec.arg, "value", None)
            self.flat.graph_outputs.append(self.meta_of(f"output_{i}", value, f"output {i}"))

    def calling_convention(self) -> None:
        spec = self.ep.call_spec
        entry = next((e for e in self.ep.module_call_graph if e.fqn == ""), None)
        self.flat.in_spec = spec_text(spec.in_spec) if spec.in_spec is not None else None
        self.flat.out_spec = spec_text(spec.out_spec) if spec.out_spec is not None else None
        self.flat.forward_arg_names = list(entry.signature.forward_arg_names) if entry and entry.signature else []
        self.flat.range_constraints = {
            str(sym): [range_bound(r.lower), range_bound(r.upper)] for sym, r in self.ep.range_constraints.items()
        }


def _check_value(value: Any, where: str) -> Any:
    """``value`` if the IR can hold it (see :mod:`common.values`); raises IRSerializationError otherwise."""
    encode(value, where)
    return value


def spec_text(spec: pytree.TreeSpec) -> str:
    """``treespec_dumps(spec)``, remembered for equal specs (a conversion and its lowering write the same two).

    Raises:
        IRSerializationError: a node type of the structure has no serialized name (a ``torch.return_types``
            structseq, a named tuple or pytree node registered without one), naming the type.
    """
    try:
        try:
            return _spec_text(spec)
        except TypeError:  # a context that cannot be hashed
            return pytree.treespec_dumps(spec)
    except NotImplementedError as exc:  # its message names the type
        raise IRSerializationError(f"a call's input or output structure cannot be written: {exc}",
                                   hint="return plain tuples, lists or dicts there, or register the type with "
                                        "torch.utils._pytree (serialized_type_name=...)") from None


@functools.lru_cache(maxsize=256)
def _spec_text(spec: pytree.TreeSpec) -> str:
    return pytree.treespec_dumps(spec)


def check_ops(nodes: Iterable[Any], allowlist: Allowlist) -> None:
    """Refuse a lowered graph that calls operators outside ``allowlist``, naming all of them at once.

    Raises:
        ConversionError: (from an ``UnsafeTargetError``) lists the operators and the ``allow=`` to pass.
    """
    missing = allowlist.required(node.op_type for node in nodes)
    if missing:
        error = required_ops_error(missing, "the model calls")
        raise ConversionError(error.message, hint=error.hint) from error
