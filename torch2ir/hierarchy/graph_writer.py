"""Step 3 of :mod:`torch2ir.hierarchy.recover`: each non-leaf frame becomes its implementation's graph.

``input`` nodes (the frame's recorded call arguments, or its data-flow inputs), ``function`` nodes (ATen ops
with their non-tensor arguments), ``get_attr`` nodes for the state the frame reads, one call node per child
frame (a leaf with its preserved signature, a signed module with the original call's arguments, results
unpacked with ``getitem``), and the ``output`` node.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx
from torch.utils import _pytree as pytree

from common.caches import CACHE_TYPES
from common.errors import ConversionError, IRSerializationError
from common.ir import Implementation
from common.names import without_counter
from common.safety import function_name
from common.values import Ref, Subgraph, encode
from torch2ir.frontend.export import OpaqueCallError
from torch2ir.hierarchy.graphs import ASSERT_SCALAR, add_node_with_edges, assert_message, flat_implementation
from torch2ir.hierarchy.recover import Frame, Hierarchy
from torch2ir.hierarchy.symbolic_order import ASSERT_NAME, canonical_items
from torch2ir.hierarchy.tensormeta import FUNCTORCH_FIX, functorch_problem, value_meta
from torch2ir.signatures.match import Dead, Signature, is_stand_in


class GraphWriter:
    """Writes one frame's graph into its implementation (step 3 of :mod:`torch2ir.hierarchy.recover`)."""

    def __init__(self, hierarchy: Hierarchy, frame: Frame, impl: Implementation) -> None:
        self.h = hierarchy
        self.frame = frame
        self.impl = impl
        self.env: dict[fx.Node, Ref] = {}
        self.used: set[str] = set()

    def name(self, wanted: str) -> str:
        """A fresh node name; ``"output"`` is kept for the graph's output node."""
        base = wanted.replace(".", "_") or "node"
        name, i = base, 1
        while name in self.used or name == "output":
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def ref(self, value: fx.Node) -> Ref:
        if value not in self.env:
            # a no-op ``.to()`` of another call (a buffer's ``to`` in a module's first call, which export reuses
            # for its later calls) is the tensor it was applied to, which may be state this frame reads itself
            value = self.h.outer_value(value, self.frame)
        if value not in self.env and value in self.frame.state_reads:
            target = self.frame.state_reads[value]
            name = self.impl.add_node(self.name(target), "get_attr", target, meta=value_meta(value.meta.get("val")))
            self.env[value] = Ref(name)
        try:
            return self.env[value]
        except KeyError:
            raise _Unplaced(value) from None

    def value(self, leaf: Any) -> Any:
        """A leaf of a signed call as an IR argument: a Ref for a value, the constant itself, and for a
        :class:`Dead` tensor the value some call returned for it, else a stand-in of its shape and dtype filled
        with NaN, on the module's device (one per graph)."""
        if isinstance(leaf, fx.Node):
            return self.ref(leaf)
        if not isinstance(leaf, Dead):
            return leaf
        if leaf.node not in self.env:
            name = add_node_with_edges(self.impl, self.name("unused"), "function", "aten.full.default",
                                       [list(leaf.shape), float("nan")],
                                       {"dtype": leaf.dtype, "device": torch.device("meta")},
                                       meta={"shape": list(leaf.shape), "dtype": leaf.dtype})
            self.env[leaf.node] = Ref(name)
        return self.env[leaf.node]

    def template(self, arg: Any) -> Any:
        """fx args -> IR args (Refs for values, Subgraphs for higher-order op bodies)."""
        if isinstance(arg, fx.Node):
            if arg.op == "get_attr":
                return Subgraph(flat_implementation(getattr(self.h.ep.graph_module, arg.target), arg.target))
            return self.ref(arg)
        if isinstance(arg, (list, tuple)):
            items = [self.template(a) for a in arg]
            return items if isinstance(arg, list) else tuple(items)
        if isinstance(arg, dict):
            return {k: self.template(v) for k, v in arg.items()}
        return arg

    def write(self) -> None:
        frame = self.frame
        sig = self.h.signed.get(id(frame))
        if sig is not None:
            for label, value in zip(input_labels(sig), sig.inputs):
                if isinstance(value, Dead):  # an argument no op uses: a tensor input all the same
                    name = self.impl.add_node(self.name(label), "input", "input",
                                              meta={"shape": list(value.shape), "dtype": value.dtype})
                    self.env.setdefault(value.node, Ref(name))
                    continue
                node = value if isinstance(value, fx.Node) else None
                # a constant's input records its value: the rebuilt module refuses another one
                plain = value is None or type(value) in (bool, int, float, str)
                meta = value_meta(node.meta.get("val")) if node is not None else \
                    value if plain else {"python": type(value).__name__}
                if node is not None and node in self.env:  # the call passed one tensor for both
                    meta = {**meta, "same_as": self.env[node].node}
                name = self.impl.add_node(self.name(label), "input", "input", meta=meta)
                if node is not None:
                    self.env.setdefault(node, Ref(name))
        inputs = self.h.user_inputs if frame is self.h.root else [] if sig is not None else list(frame.inputs)
        computed = {structural_name(item.name) for item in frame.items if isinstance(item, fx.Node)}
        names: list[str] = []
        for i, value in enumerate(inputs):
            meta = value_meta(value.meta.get("val"))
            if frame is self.h.root and i in self.h.same_input and isinstance(meta, dict):
                meta = {**meta, "same_as": names[self.h.same_input[i]]}  # one tensor given twice
            # the root's inputs keep the model's argument names; a data-flow input is named after the value, but
            # never with a name the graph's own nodes start from (which would renumber them: ``add`` -> ``add_1``)
            label = value.name if frame is self.h.root else structural_name(value.name)
            if frame is not self.h.root and label in computed:
                label += "_in"
            names.append(self.impl.add_node(self.name(label), "input", "input", meta=meta))
            self.env[value] = Ref(names[-1])
        # runs of symbolic scalars and their assertions in one order (torch2ir.hierarchy.symbolic_order)
        for item in canonical_items(frame.items):
            try:
                if isinstance(item, Frame):
                    self.call(item)
                else:
                    self.function(item)
            except _Unplaced as exc:
                if not any(p[0] == self.impl.name and p[2] == FUNCTORCH_FIX for p in self.h.problems):
                    self.h.problems.append((self.impl.name, f"value {exc.value.name!r} is used before it is "
                                            "computed in this module's graph", "this module's calls interleave; "
                                            "report it"))  # (a refused transform's values are never computed)
                return
            except IRSerializationError as exc:
                self.h.problems.append((self.impl.name, exc.message, "make the argument a plain value"))
                return
        try:
            self.output()
        except _Unplaced as exc:  # a result computed where this module cannot read it (inside another module's leaf)
            self.h.problems.append((self.impl.name, f"the module returns value {exc.value.name!r}, which its graph "
                                    "does not compute", "report it with the model"))

    def function(self, node: fx.Node) -> None:
        if is_stand_in(node):  # written where a signed call passes or returns it (see GraphWriter.value)
            return
        try:
            target = function_name(node.target)
        except Exception:  # noqa: BLE001 - function_name raises several types for a non-allowed target
            problem = functorch_problem(node.target)
            if problem is not None:
                if problem not in (p[1] for p in self.h.problems if p[0] == self.impl.name):
                    self.h.problems.append((self.impl.name, problem, FUNCTORCH_FIX))
                return
            self.h.problems.append((self.impl.name, f"node {node.name!r} calls {node.target!r}, which is not an "
                                    "ATen op or allowed function", "register the op, or keep it inside a leaf module"))
            return
        args, kwargs = self.template(node.args), self.template(node.kwargs)
        if target == ASSERT_SCALAR:
            args = assert_message(args, node.args[0] if node.args else None)
        encode(args, f"node {node.name}")
        encode(kwargs, f"node {node.name}")
        wanted = ASSERT_NAME if target == ASSERT_SCALAR else structural_name(node.name)  # inserted or traced alike
        name = add_node_with_edges(self.impl, self.name(wanted), "function", target, args, kwargs,
                                   meta=value_meta(node.meta.get("val")))
        self.env[node] = Ref(name)
        self.h.origin[node] = (self.impl, name)

    def call(self, child: Frame) -> None:
        callee = self.h.table.key(child.path)
        if callee is None:
            return
        if self.frame.path and not child.path.startswith(self.frame.path + "."):
            # a module passed in as an argument (``self.decoder(x, norm=self.decoder_norm)``): no attribute path
            # of the caller reaches it, and a path cut from its name would reach another module
            problem = (f"module {child.path!r} is called inside {self.frame.path!r}, which does not hold it (a module "
                       "passed as an argument, or kept without being registered as a submodule)")
            if problem not in (p[1] for p in self.h.problems if p[0] == self.impl.name):
                self.h.problems.append((self.impl.name, problem, "call it from a module that holds it (pass its "
                                        "output instead of the module), or register it as a submodule of the caller; "
                                        "or keep the caller inside a leaf module"))
            return
        rel = self.frame.relative(child.path)
        extra = {} if rel == default_target(self.impl.name, callee) else {"target": rel}
        ctype = self.h.table.leaf_type(self.h.table.module_of_key[callee]) if child.leaf else "module"
        name = self.name(rel if child.call_index == 0 else f"{rel}@{child.call_index}")
        sig = self.h.signed.get(id(child))
        if child.leaf:
            self.leaf_call(child, callee, ctype, name, extra)
        elif sig is not None:
            leaves = [self.value(v) for v in sig.inputs]
            call_args, call_kwargs = self.unflatten(iter(leaves), sig.in_spec)
            add_node_with_edges(self.impl, name, ctype, callee, call_args, call_kwargs, **extra)
            self.h.call_nodes[id(child)] = (self.impl, name)
            self._bind_outputs(name, sig.out_spec, [v.node if isinstance(v, Dead) else v if isinstance(v, fx.Node)
                                                    else None for v in sig.outputs])
        else:
            args = [self.ref(v) for v in child.inputs]
            add_node_with_edges(self.impl, name, ctype, callee, args, {}, **extra)
            self.h.call_nodes[id(child)] = (self.impl, name)
            outputs = list(child.outputs)
            for i, value in enumerate(outputs):
                self.env[value] = Ref(name, None if len(outputs) == 1 else i)

    def unflatten(self, leaves: Iterator[Any], spec: pytree.TreeSpec) -> Any:
        """``tree_unflatten`` of a signed call's arguments, a ``torch.Size`` of values the graph computes built by a
        ``torch.Size`` node (a ``torch.Size`` cannot hold a :class:`Ref`)."""
        if spec.is_leaf():
            return next(leaves)
        children = [self.unflatten(leaves, c) for c in spec.children()]
        if spec.type is torch.Size:
            if all(type(c) is int for c in children):
                return torch.Size(children)
            name = add_node_with_edges(self.impl, self.name("size"), "function", "torch.Size", [children], {})
            return Ref(name)
        return pytree.SUPPORTED_NODES[spec.type].unflatten_fn(children, spec.context)

    def leaf_call(self, child: Frame, callee: str, ctype: str, name: str, extra: dict[str, Any]) -> None:
        sig = self.h.signatures.get(self.h.signature_key(child))
        if sig is not None and len(sig.inputs) != sig.in_spec.num_leaves:
            sig = None  # export could not record it (e.g. the call sits inside a higher-order op)
        if sig is None:
            if len(child.outputs) > 1:
                self.h.problems.append((callee, f"leaf {ctype!r} returns {len(child.outputs)} values but its call "
                                        "signature was not preserved", "report this model; the signature is needed"))
                return
            # a leaf reads its own weights even when export names them by another path (tied, shared)
            args = [self.ref(v) for v in child.inputs if not self.h.holds_state(child, v)]
            outputs = list(child.outputs)
            meta = {"meta": value_meta(outputs[0].meta.get("val"))} if len(outputs) == 1 else {}
            add_node_with_edges(self.impl, name, ctype, callee, args, {}, **extra, **meta)
            self.h.origin[child] = (self.impl, name)
            for value in outputs:
                self.env[value] = Ref(name)
            return
        by_name = {n.name: n for n in self.h.ep.graph.nodes}
        leaves = [self.ref(by_name[a.name]) if hasattr(a, "name") and a.name in by_name else a.value
                  for a in sig.inputs]
        try:
            call_args, call_kwargs = pytree.tree_unflatten(leaves, sig.in_spec)
        except Exception as exc:  # a container whose constructor checks its items (brevitas' QuantTensor)
            raise OpaqueCallError.of(child.path, ctype, exc) from exc
        add_node_with_edges(self.impl, name, ctype, callee, call_args, call_kwargs, **extra,
                            meta=value_meta(_first_val(by_name, sig.outputs)))
        self.h.origin[child] = (self.impl, name)
        outs = [by_name.get(getattr(a, "name", None)) for a in sig.outputs]
        self._bind_outputs(name, sig.out_spec, outs)

    def _bind_outputs(self, name: str, spec: pytree.TreeSpec, outs: list[fx.Node | None]) -> None:
        """Bind the values a call returns (``outs``, leaves of ``spec``) to the call node, unpacking nested
        structures with ``getitem`` nodes (by key in a dict, by position otherwise)."""
        if spec.is_leaf():
            if outs[0] is not None:
                self.env[outs[0]] = Ref(name)
            return
        if f"{spec.type.__module__}.{spec.type.__qualname__}" in CACHE_TYPES:
            raise ConversionError(
                f"the call {name!r} returns a {spec.type.__name__} (a key/value cache) whose tensors its caller "
                "reads: a cache cannot be unpacked by position", implementation=self.impl.name,
                hint="to generate with the rebuild, convert with a past: torch2ir.generation.convert_for_generation"
                "(model); else pass use_cache=False in kwargs")
        keyed = spec.type in (dict, collections.OrderedDict)
        position = 0
        for i, child in enumerate(spec.children()):
            count = child.num_leaves
            chunk = outs[position : position + count]
            position += count
            if not any(o is not None for o in chunk):
                continue
            if child.is_leaf() and not keyed:
                self.env[chunk[0]] = Ref(name, i)  # type: ignore[index]
            else:
                sub = add_node_with_edges(self.impl, self.name(f"{name}_{i}"), "function", "operator.getitem",
                                          [Ref(name), spec.context[i] if keyed else i], {})
                self._bind_outputs(sub, child, chunk)

    def output(self) -> None:
        if self.frame is self.h.root:
            out_node = next(n for n in self.h.ep.graph.nodes if n.op == "output")
            sig = self.h.ep.graph_signature
            user = [v for v in out_node.args[0] if not isinstance(v, fx.Node) or v.name in sig.user_outputs]
            value = [self.template(v) for v in user]
        elif id(self.frame) in self.h.signed:
            value = [self.value(v) for v in self.h.signed[id(self.frame)].outputs]
        else:
            outs = [self.ref(v) for v in self.frame.outputs]
            value = outs[0] if len(outs) == 1 else tuple(outs)
        add_node_with_edges(self.impl, "output", "output", "output", [value], {})


def structural_name(exported: str) -> str:
    """The name of an exported value without the counter export appends model-wide (``add_252`` -> ``add``).

    :meth:`GraphWriter.name` numbers the names again within each graph (``add``, ``add_1``...), in the order
    the graph computes them, so that a node's name depends on its graph alone: the same layer gets the same
    names wherever it sits in a model, and a rebuilt model converts back to the same names (export's counters
    run over the whole model, and shift when anything before them changes, e.g. under ``dynamic_shapes``).
    """
    return without_counter(exported)


def input_labels(sig: Signature) -> list[str]:
    """A name per leaf of a signed call's arguments: the parameter's name, ``name_i`` inside a structure."""
    labels: list[str] = []
    args_spec, kwargs_spec = sig.in_spec.children()
    for name, spec in zip(sig.names, [*args_spec.children(), *kwargs_spec.children()]):
        count = spec.num_leaves
        labels += [name] if count == 1 and spec.is_leaf() else [f"{name}_{i}" for i in range(count)]
    return labels


def default_target(caller: str, callee: str) -> str | None:
    """Attribute path by which ``caller`` reaches implementation ``callee`` when none is recorded."""
    if caller == "root":
        return callee
    return callee[len(caller) + 1 :] if callee.startswith(caller + ".") else None


class _Unplaced(Exception):
    def __init__(self, value: fx.Node) -> None:
        super().__init__(value.name)
        self.value = value


def _first_val(by_name: dict[str, fx.Node], outputs: list[Any]) -> Any:
    vals = [by_name[a.name].meta.get("val") if getattr(a, "name", None) in by_name else None for a in outputs]
    return vals[0] if len(vals) == 1 else vals
