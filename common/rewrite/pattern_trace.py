"""The functions of :func:`common.rewrite.replace_pattern`, traced: ``torch.export`` of a pattern or a replacement
into ATen calls, and the shapes a replacement computes on the values a match binds (what the IR records on
each new node)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn

from common.ir import IR, Implementation
from common.safety import function_name
from common.values import Ref, iter_refs

from .core import RewriteError, callee

#: Largest input (elements in all) a replacement is run on for real when an op of it has no ``meta`` kernel.
_REAL_RUN_ELEMENTS = 1 << 22
#: Calls a trace may hold that compute nothing the output reads (export's own checks).
_CHECKS = ("aten._assert", "aten.sym_constrain_range")

@dataclass
class Traced:
    """A traced pattern or replacement: its input nodes, call nodes (in order) and output nodes (one per value it
    returns, in order)."""

    inputs: list[fx.Node]
    calls: list[fx.Node]
    outputs: list[fx.Node]
    names: dict[fx.Node, str] = field(default_factory=dict)  # call node -> IR function name


def trace(fn: Callable[..., Any], example_inputs: Sequence[Any], role: str) -> Traced:
    """``fn`` traced by ``torch.export`` (non-strict, as torch2ir traces) into ATen calls.

    Raises:
        RewriteError: ``fn`` cannot be traced, makes tensor constants, or returns other than one tensor or a
            tuple (or list) of tensors.
    """
    if not callable(fn):
        raise RewriteError(f"the {role} must be a function of tensors, not {type(fn).__name__}",
                           hint="pass a plain Python function, e.g. lambda x: x * torch.sigmoid(x)")

    class _Call(nn.Module):
        def forward(self, *args: Any) -> Any:
            return fn(*args)

    try:
        exported = torch.export.export(_Call(), _apart(example_inputs), strict=False)
    except Exception as exc:  # noqa: BLE001 - any tracing failure is reported as the rewrite's error
        raise RewriteError(f"the {role} cannot be traced by torch.export: {type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                           hint="write it with torch operations on its tensor arguments; pass example_inputs= of "
                           "the shapes it needs") from None
    signature = exported.graph_signature
    if len(signature.user_inputs) != len(signature.input_specs):
        raise RewriteError(f"the {role} makes a tensor constant or reads a parameter",
                           hint="pass every tensor it uses as an argument")
    graph = exported.graph_module.graph
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in graph.nodes if n.op == "output")
    outputs = list(out_node.args[0])
    if not outputs or not all(isinstance(o, fx.Node) for o in outputs):
        raise RewriteError(f"the {role} returns {len(outputs)} values, not all of them tensors",
                           hint="return one tensor, or a tuple of tensors")
    needed: set[fx.Node] = set()
    stack = list(outputs)
    while stack:  # only what the output depends on (export may keep unused checks)
        node = stack.pop()
        if node in needed:
            continue
        needed.add(node)
        stack.extend(node.all_input_nodes)
    traced = Traced(inputs, [n for n in graph.nodes if n.op == "call_function" and n in needed], outputs)
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        try:
            name = function_name(node.target)
        except Exception:  # noqa: BLE001 - a target without an IR name
            raise RewriteError(f"the {role} calls {node.target!r}, which an IR graph cannot hold",
                               hint="use ATen operations") from None
        if node in needed:
            traced.names[node] = name
        elif not name.startswith(_CHECKS):
            raise RewriteError(f"the {role} calls {name}, whose result its output does not use",
                               hint="a call made for its side effect cannot be spliced into a graph; drop it")
    return traced


def _apart(example_inputs: Sequence[Any]) -> tuple[Any, ...]:
    """The example inputs with a tensor sharing memory with an earlier one copied (``[w, b] * 3`` passes one tensor
    three times, which export would trace as one argument read three times: a pattern binding all three to one
    value)."""
    seen: set[int] = set()
    out = []
    for value in example_inputs:
        if isinstance(value, torch.Tensor):
            if _memory(value) in seen:
                value = value.clone()
            seen.add(_memory(value))
        out.append(value)
    return tuple(out)


def _memory(tensor: torch.Tensor) -> int:
    """Where a tensor's data lives (the object itself for tensors without memory: meta, empty)."""
    if tensor.device.type == "meta" or not tensor.numel():
        return id(tensor)
    return tensor.untyped_storage().data_ptr()


def value_meta(ir: IR, graph: Implementation, ref: Ref, depth: int = 0) -> Any:
    """The recorded ``{"shape", "dtype"}`` of the value ``ref`` names in ``graph``; a call of a graph module records
    none itself, so the callee's output value is read instead."""
    attrs = graph.node(ref.node)
    meta = attrs.get("meta")
    if meta is None and depth < 64:
        target = callee(attrs)
        if target is not None and target in ir and ir[target].graphs():
            body = ir[target]
            outputs = [n for n in body.nodes if body.node(n)["type"] == "output"]
            leaves = [r for _, r in iter_refs(body.node(outputs[0]).get("args", []))] if outputs else []
            pick = 0 if ref.index is None and len(leaves) == 1 else ref.index
            if pick is not None and pick < len(leaves):
                return value_meta(ir, body, leaves[pick], depth + 1)
        return None
    if ref.index is not None:
        return meta[ref.index] if isinstance(meta, list) and ref.index < len(meta) else None
    return meta


def replacement_metas(rep: Traced, inputs: list[Any], key: str, anchor: str) -> dict[fx.Node, Any]:
    """Shape and dtype of each replacement call, from the matched inputs' recorded shapes, computed on ``meta``.

    A symbolic size (a string) is given two different trial values; a result size that follows one of them is
    that symbol, one that stays put is a number, anything else is refused.

    Raises:
        RewriteError: an input has no recorded shape, or a result size is an expression of symbolic sizes.
    """
    symbols = sorted({d for m in inputs if isinstance(m, dict) for d in m.get("shape", []) if isinstance(d, str)})
    for meta in inputs:
        if not (isinstance(meta, dict) and "shape" in meta and "dtype" in meta):
            raise RewriteError("a matched input has no recorded shape and dtype", implementation=key, node=anchor,
                               hint="replace_pattern matches tensor values")
    runs = []
    for offset in (0, 1):
        trial = {s: 1009 + 17 * i + 613 * offset for i, s in enumerate(symbols)}
        shapes = [[trial.get(d, d) for d in meta["shape"]] for meta in inputs]
        try:
            env = _run(rep, [torch.empty(shape, dtype=m["dtype"], device="meta") for shape, m in zip(shapes, inputs)])
        except Exception as exc:  # noqa: BLE001 - no meta kernel, or the replacement does not fit these shapes
            small = not symbols and sum(math.prod(shape) for shape in shapes) <= _REAL_RUN_ELEMENTS
            try:  # an op without a meta kernel (fake_quantize...): on ones of the real (static, small) shapes
                if not small:
                    raise exc
                env = _run(rep, [torch.ones(shape, dtype=m["dtype"]) for shape, m in zip(shapes, inputs)])
            except Exception as again:  # noqa: BLE001
                raise RewriteError(f"the replacement fails on the matched shapes: {type(again).__name__}: "
                                   f"{str(again).splitlines()[0][:160] if str(again) else ''}", implementation=key,
                                   node=anchor, hint="add a match filter on the shapes it supports") from None
        runs.append((trial, env))
    (trial_a, env_a), (trial_b, env_b) = runs
    back = {(trial_a[s], trial_b[s]): s for s in symbols}
    out: dict[fx.Node, Any] = {}
    for node in rep.calls:
        out[node] = _meta_of(env_a[node], env_b[node], back, key, anchor)
    return out


def _run(rep: Traced, inputs: list[torch.Tensor]) -> dict[fx.Node, Any]:
    env: dict[fx.Node, Any] = dict(zip(rep.inputs, inputs))
    for node in rep.calls:
        env[node] = node.target(*_fill(node.args, env), **_fill(dict(node.kwargs), env))
    return env


def _fill(value: Any, env: Mapping[fx.Node, Any]) -> Any:
    if isinstance(value, fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return type(value)(_fill(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _fill(v, env) for k, v in value.items()}
    return value


def _meta_of(a: Any, b: Any, back: Mapping[tuple[int, int], str], key: str, anchor: str) -> Any:
    if isinstance(a, torch.Tensor):
        shape: list[int | str] = []
        for x, y in zip(a.shape, b.shape):
            if x == y:
                shape.append(int(x))
            elif (x, y) in back:
                shape.append(back[(x, y)])
            else:
                raise RewriteError("the replacement computes a size from a dynamic size; the IR cannot record it here",
                                   implementation=key, node=anchor, hint="convert with static shapes, or filter the "
                                   "match")
        return {"shape": shape, "dtype": a.dtype}
    if isinstance(a, (list, tuple)):
        return [_meta_of(x, y, back, key, anchor) for x, y in zip(a, b)]
    return None




class SizedReplacements:
    """The replacement traced again at the shapes and dtypes the values of a match have, once per distinct set.

    A replacement's trace holds its sizes as numbers (``F.layer_norm(x, (x.shape[-1],))`` traced at 16 channels
    says 16); traced at each match's own shapes, one call replaces a pattern wherever it sits, whatever its sizes
    (a LayerNorm written as ops at 16 and at 32 channels). The traces run on ``meta`` tensors (no memory for the
    sizes; real ones, zeros, when an op has no ``meta`` kernel and the values are small). A match whose values
    have no recorded, fixed shapes (a symbolic size) uses the trace at ``example_inputs``, whose sizes
    :func:`replacement_metas` checks.
    """

    def __init__(self, fn: Callable[..., Any], example_inputs: Sequence[Any]) -> None:
        self.fn = fn
        self.examples = list(example_inputs)
        self.cache: dict[tuple, Traced] = {}

    def __call__(self, metas: Sequence[Any]) -> Traced | None:
        """The replacement traced at the shapes and dtypes ``metas`` (one per argument) record, or ``None``."""
        if len(metas) != len(self.examples) or not all(isinstance(e, torch.Tensor) for e in self.examples):
            return None
        key = []
        for meta in metas:
            shape, dtype = (meta.get("shape"), meta.get("dtype")) if isinstance(meta, dict) else (None, None)
            if not isinstance(shape, list) or not isinstance(dtype, torch.dtype) or \
                    not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
                return None
            key.append((tuple(shape), dtype))
        signature = tuple(key)
        if signature not in self.cache:
            try:
                traced = trace(self.fn, [torch.empty(sh, dtype=dt, device="meta") for sh, dt in signature],
                               "replacement")
            except RewriteError:
                if sum(math.prod(sh) for sh, _ in signature) > _REAL_RUN_ELEMENTS:
                    raise
                # an op without a meta kernel (a fused fake quantization): traced on real tensors of those sizes
                traced = trace(self.fn, [torch.zeros(sh, dtype=dt) for sh, dt in signature], "replacement")
            self.cache[signature] = traced
        return self.cache[signature]


__all__ = ["SizedReplacements", "Traced", "replacement_metas", "trace", "value_meta"]
