"""The ATen-level IR: one flat graph of operators with tensor metadata, weight-free.

A :class:`FlatIR` is what ``torch2ir.lower`` extracts from ``torch.export`` (on a model that may
live on the ``meta`` device): every operator call of the model as a :class:`FlatNode` with its
``op_type`` (``"aten.conv2d.default"``), its arguments named by the op schema (tensor arguments are
:class:`~common.values.Ref` s to named values), the metadata of the values it reads and writes, and
the module it ran in. Graph inputs, outputs, weights and the calling convention complete it;
``weight_name_mapping`` maps each weight's placeholder name to its state-dict key.

Values are named: a graph input, a weight (its placeholder name) or an output of a node. An op with
several outputs (``aten.native_layer_norm``, ``aten.split``) names each output; ``getitem`` is not a
node. The plain-dict form (:meth:`FlatIR.to_dict`) and the JSON file (:meth:`FlatIR.save`) are
specified in ``docs/ir-spec.md``; tensor values (constants of a model that had values) go to a
``.safetensors`` file beside the JSON, never inline.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import torch

from .safety import Allowlist
from .schema import DEFAULT_MAX_NODES, ValueFn, _same
from .values import Ref, iter_refs, values_equal

#: ``kind`` of a :class:`ValueMeta`.
VALUE_KINDS = ("tensor", "symbol", "constant")
#: ``kind`` of a :class:`WeightMeta`.
WEIGHT_KINDS = ("parameter", "buffer", "constant")

Dim = int | str  # a concrete size, or a symbolic one as its expression ("s0", "2*s1")


@dataclass
class ValueMeta:
    """Metadata of one named value.

    Args:
        name: the value's name (unique among graph inputs, weights and node outputs).
        kind: ``"tensor"`` (``shape`` and ``dtype``), ``"symbol"`` (a symbolic scalar, ``sym``)
            or ``"constant"`` (a Python value, ``value``).
        shape: sizes; symbolic sizes as strings.
        dtype: dtype name (``"float32"``).
        sym: expression of a symbolic scalar (``"s0"``).
        value: the value of a constant.
    """

    name: str
    kind: str = "tensor"
    shape: list[Dim] | None = None
    dtype: str | None = None
    sym: str | None = None
    value: Any = None

    @classmethod
    def tensor(cls, name: str, shape: Iterable[Dim], dtype: str) -> ValueMeta:
        return cls(name, "tensor", list(shape), dtype)

    def to_dict(self, value_fn: ValueFn = _same, where: str = "value") -> dict[str, Any]:
        if self.kind == "tensor":
            return {"name": self.name, "shape": list(self.shape or []), "dtype": self.dtype}
        if self.kind == "symbol":
            return {"name": self.name, "sym": self.sym}
        return {"name": self.name, "value": value_fn(self.value, f"{where}.value")}


@dataclass
class WeightMeta:
    """A parameter, buffer or lifted constant the graph reads (its value is not in the IR).

    Args:
        name: the placeholder name (``"p_fc_weight"``); ``weight_name_mapping[name]`` is its state-dict key.
        kind: ``"parameter"``, ``"buffer"`` or ``"constant"`` (a lifted tensor attribute).
        shape: sizes.
        dtype: dtype name.
        requires_grad: (parameters) whether it requires grad.
        persistent: (buffers) whether it is in the model's ``state_dict()``.
    """

    name: str
    kind: str
    shape: list[Dim]
    dtype: str
    requires_grad: bool | None = None
    persistent: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "shape": list(self.shape), "dtype": self.dtype}
        if self.requires_grad is not None:
            out["requires_grad"] = self.requires_grad
        if self.persistent is not None:
            out["persistent"] = self.persistent
        return out


@dataclass
class FlatNode:
    """One operator call.

    Args:
        name: unique node name.
        op_type: qualified op name (``"aten.conv2d.default"``, ``"operator.mul"``, ``"mylib.op.default"``).
        args: positional arguments by schema name, in order (``"arg0"``, ... for schema-less functions);
            values are :class:`~common.values.Ref` s to named values, or plain values.
        kwargs: keyword arguments by schema name.
        inputs: metadata of the values the arguments reference, in argument order.
        outputs: metadata of the values the call produces (several for a multi-output op; none for asserts).
        module_path: path of the innermost module the call ran in (``"root"`` for the model itself).
        source: the module-level IR node it was lowered from, ``(implementation, node)``, or
            ``(implementation, node, variant)`` for a node of the ``variant``-th per-call graph (1, 2, ...);
            ``None`` when unknown (lowered without a module-level IR). An op inside a handled leaf points to
            the leaf's call node; an op inside a higher-order op's body to the higher-order op's node.
    """

    name: str
    op_type: str
    args: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: list[ValueMeta] = field(default_factory=list)
    outputs: list[ValueMeta] = field(default_factory=list)
    module_path: str = "root"
    source: tuple[str, str] | tuple[str, str, int] | None = None

    def refs(self) -> list[Ref]:
        """The :class:`Ref` s in ``args`` then ``kwargs``, in order."""
        return [r for _, r in iter_refs([self.args, self.kwargs])]

    def to_dict(self, value_fn: ValueFn = _same) -> dict[str, Any]:
        where = f"nodes[{self.name!r}]"
        out = {
            "name": self.name,
            "op_type": self.op_type,
            "module_path": self.module_path,
            "args": {k: value_fn(v, f"{where}.args.{k}") for k, v in self.args.items()},
            "kwargs": {k: value_fn(v, f"{where}.kwargs.{k}") for k, v in self.kwargs.items()},
            "inputs": [m.to_dict(value_fn, where) for m in self.inputs],
            "outputs": [m.to_dict(value_fn, where) for m in self.outputs],
        }
        if self.source is not None:
            out["source"] = list(self.source)
        return out


class FlatIR:
    """The ATen-level IR of a model (see the module docstring and ``docs/ir-spec.md``).

    Attributes:
        nodes: operator calls in execution order.
        graph_inputs: the user inputs, flattened (``in_spec`` rebuilds ``(args, kwargs)`` from them).
        graph_outputs: the outputs, flattened (``out_spec`` rebuilds the output structure).
        weights: parameters, buffers and lifted constants the graph reads.
        weight_name_mapping: weight placeholder name -> state-dict key.
        in_spec / out_spec: torch pytree specs (``treespec_dumps`` JSON) of the calling convention.
        forward_arg_names: names of the model's forward arguments.
        same_inputs: graph input name -> the earlier graph input that was the very same tensor in the traced call
            (the graph reads one of them for both: a call must pass one tensor there too).
        range_constraints: ``{symbol: [min, max]}`` of dynamic dimensions (``"int_oo"``: unbounded).
        meta: facts about the extraction: ``model`` (class), ``torch_version``, ``decomposition``
            (``"none"``, ``"core_aten"`` or ``"custom"``), ``device`` (the device traced on).
        tensors: values of weights no state dict holds (constants, non-persistent buffers), by state key.
    """

    def __init__(
        self,
        nodes: Iterable[FlatNode] = (),
        *,
        graph_inputs: Iterable[ValueMeta] = (),
        graph_outputs: Iterable[ValueMeta] = (),
        weights: Iterable[WeightMeta] = (),
        weight_name_mapping: Mapping[str, str] | None = None,
        in_spec: str | None = None,
        out_spec: str | None = None,
        forward_arg_names: Iterable[str] = (),
        range_constraints: Mapping[str, list[Any]] | None = None,
        meta: Mapping[str, Any] | None = None,
        tensors: Mapping[str, torch.Tensor] | None = None,
        same_inputs: Mapping[str, str] | None = None,
    ) -> None:
        self.nodes: list[FlatNode] = list(nodes)
        self.graph_inputs: list[ValueMeta] = list(graph_inputs)
        self.graph_outputs: list[ValueMeta] = list(graph_outputs)
        self.weights: list[WeightMeta] = list(weights)
        self.weight_name_mapping: dict[str, str] = dict(weight_name_mapping or {})
        self.in_spec = in_spec
        self.out_spec = out_spec
        self.forward_arg_names: list[str] = list(forward_arg_names)
        self.range_constraints: dict[str, list[Any]] = {k: list(v) for k, v in (range_constraints or {}).items()}
        self.meta: dict[str, Any] = dict(meta or {})
        self.tensors: dict[str, torch.Tensor] = dict(tensors or {})
        self.same_inputs: dict[str, str] = dict(same_inputs or {})

    # -- lookups -------------------------------------------------------------------------
    def node(self, name: str) -> FlatNode:
        """The node called ``name``.

        Raises:
            KeyError: no such node.
        """
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def values(self) -> dict[str, ValueMeta]:
        """Every named value (graph inputs, weights as tensors, node outputs) by name."""
        out: dict[str, ValueMeta] = {m.name: m for m in self.graph_inputs}
        out.update({w.name: ValueMeta.tensor(w.name, w.shape, w.dtype) for w in self.weights})
        for node in self.nodes:
            out.update({m.name: m for m in node.outputs})
        return out

    def lowered_from(self) -> dict[tuple[str, str, int], list[str]]:
        """The reverse of the nodes' ``source`` links: ``{(implementation, node, variant): [flat node names]}``
        (``variant`` 0 for an implementation's main graph), the flat nodes in execution order."""
        out: dict[tuple[str, str, int], list[str]] = {}
        for node in self.nodes:
            if node.source is not None:
                key, name, *rest = node.source
                out.setdefault((key, name, rest[0] if rest else 0), []).append(node.name)
        return out

    def __iter__(self) -> Iterator[FlatNode]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def graph(self) -> nx.DiGraph:
        """The dataflow graph as a ``networkx.DiGraph`` (built afresh on each access).

        Nodes: every graph input (``kind="input"``), weight (``kind="weight"``, ``target`` its
        state-dict key) and op node (``kind="op"``, ``op_type``, ``module_path``), plus ``"output"``.
        An edge ``u -> v`` carries ``values``: the names of the values ``v`` reads from ``u``.
        """
        g = nx.DiGraph()
        producer: dict[str, str] = {}
        for m in self.graph_inputs:
            g.add_node(m.name, kind="input", meta=m)
            producer[m.name] = m.name
        for w in self.weights:
            g.add_node(w.name, kind="weight", target=self.weight_name_mapping.get(w.name), meta=w)
            producer[w.name] = w.name
        for node in self.nodes:
            g.add_node(node.name, kind="op", op_type=node.op_type, module_path=node.module_path)
            for ref in node.refs():
                _add_value_edge(g, producer.get(ref.node), node.name, ref.node)
            for m in node.outputs:
                producer[m.name] = node.name
        g.add_node("output", kind="output")
        for m in self.graph_outputs:
            if m.kind != "constant":
                _add_value_edge(g, producer.get(m.name), "output", m.name)
        return g

    # -- plain dict form -----------------------------------------------------------------
    def to_dict(self, *, value_fn: ValueFn = _same) -> dict[str, Any]:
        """The plain-dict form (``FlatIR.from_dict(flat.to_dict()) == flat``); tensors are not included."""
        return {
            "meta": {k: value_fn(v, f"meta.{k}") for k, v in self.meta.items()},
            "graph_inputs": [m.to_dict(value_fn, "graph_inputs") for m in self.graph_inputs],
            "graph_outputs": [m.to_dict(value_fn, "graph_outputs") for m in self.graph_outputs],
            "in_spec": self.in_spec,
            "out_spec": self.out_spec,
            "forward_arg_names": list(self.forward_arg_names),
            "range_constraints": {k: list(v) for k, v in self.range_constraints.items()},
            "weights": [w.to_dict() for w in self.weights],
            "weight_name_mapping": dict(self.weight_name_mapping),
            "nodes": [n.to_dict(value_fn) for n in self.nodes],
            **({"same_inputs": dict(self.same_inputs)} if self.same_inputs else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, value_fn: ValueFn = _same,
                  max_nodes: int | None = DEFAULT_MAX_NODES) -> FlatIR:
        """Parse the plain-dict form (no semantic checks: see :meth:`validate`).

        ``max_nodes``: most entries of ``nodes``, ``graph_inputs``, ``graph_outputs``, ``weights`` and
        ``forward_arg_names`` together (``None``: no limit), counted before any is parsed.

        Raises:
            IRFormatError: a field is missing, unknown or of the wrong type, or the lists exceed ``max_nodes``.
        """
        from .flat_schema import parse_flat

        return parse_flat(cls, d, value_fn, max_nodes)

    # -- checks and files ----------------------------------------------------------------
    def validate(self, *, allowlist: Allowlist | None = None, extra_ops: Iterable[str] = ()) -> FlatIR:
        """Check op names against the allow-list, value references, argument names and weights.

        Args:
            allowlist: a :class:`~common.safety.Allowlist` (default: the default one).
            extra_ops: further op names to accept (ops that have a registered executor).

        Returns:
            ``self``.

        Raises:
            UnsafeTargetError: an op is neither allowed nor in ``extra_ops`` (names the node).
            IRValidationError: a subclass naming the node or value that is inconsistent.
        """
        from .flat_schema import validate_flat

        validate_flat(self, allowlist, frozenset(extra_ops))
        return self

    def save(self, path: str | os.PathLike) -> Path:
        """Write the versioned, deterministic JSON file; tensors go to ``<stem>.tensors.<sha256[:16]>.safetensors``."""
        from .flat_files import save_flat

        return save_flat(self, path)

    @classmethod
    def load(
        cls, path: str | os.PathLike, *, allowlist: Allowlist | None = None, extra_ops: Iterable[str] = (),
        allow: Iterable[str] | None = None, max_nodes: int | None = DEFAULT_MAX_NODES,
    ) -> FlatIR:
        """Read a file written by :meth:`save`, validating it (see :meth:`validate`) before returning.

        ``allow``: operators of other namespaces to accept besides ``allowlist`` (``"transformers::*"``).
        ``max_nodes``: the file's node budget (see :meth:`from_dict`; the JSON parser also stops past
        ``JSON_OBJECTS_PER_NODE * max_nodes`` objects); ``None`` disables it, for a trusted file.

        Raises:
            IRFormatError: the file is not a FlatIR JSON file of a supported version.
            UnsafeTargetError: an op name is outside the allow-list (nothing is imported or called); the ops
                a file records as needed are all listed, with the ``allow=`` to pass.
        """
        from .flat_files import load_flat

        return load_flat(cls, path, (allowlist or Allowlist()).extended(allow), frozenset(extra_ops), max_nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FlatIR):
            return NotImplemented
        return (
            values_equal(self.to_dict(), other.to_dict())
            and self.tensors.keys() == other.tensors.keys()
            and all(_same_tensor(v, other.tensors[k]) for k, v in self.tensors.items())
        )

    def __repr__(self) -> str:
        model = self.meta.get("model", "?")
        return f"FlatIR({model}: {len(self.nodes)} nodes, {len(self.weights)} weights)"


def _add_value_edge(g: nx.DiGraph, src: str | None, dst: str, value: str) -> None:
    if src is None:
        return
    if g.has_edge(src, dst):
        g.edges[src, dst]["values"].append(value)
    else:
        g.add_edge(src, dst, values=[value])


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and (a.is_meta or b.is_meta or bool((a == b).all()))


__all__ = ["VALUE_KINDS", "WEIGHT_KINDS", "FlatIR", "FlatNode", "ValueMeta", "WeightMeta"]
