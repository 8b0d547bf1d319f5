"""Text views of an in-memory IR: the module tree with types and counts, and one graph as code-like text.

- :func:`ir_summary` (``ir.summary()``, ``str(ir)``): the model class, implementations by type, graph
  nodes, parameters, inputs and the module tree; a run of identical blocks is one line
  (``0-31 x32  LlamaDecoderLayer``). ``ir2torch show`` prints the same lines for a file.
- :func:`graph_text` (``ir["path"].print_readable()``): one implementation's graph, one line per node,
  like torch.fx's ``print_readable``: ``lin: "f32[2, 8]" = self.lin(x)``, with the shape and dtype
  where the IR records them (node ``meta``, state records, root inputs).

Nothing here runs a node: the text is made from the recorded data only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from .errors import IRError
from .treespec import load_spec
from .values import TRAINING, Ref, Subgraph

if TYPE_CHECKING:
    from .ir import IR, Implementation

__all__ = ["graph_text", "ir_summary", "ir_summary_lines", "tensor_text",
           "top_counts", "tree_lines"]

_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
                 "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8",
                 "complex64": "c64", "complex128": "c128"}


def tensor_text(meta: Any, *, short: bool = False) -> str:
    """``float32[2, 8]`` (``f32[2, 8]`` with ``short``) for a ``{"shape", "dtype"}`` record; ``?`` without a shape."""
    if not isinstance(meta, Mapping) or "shape" not in meta:
        return "?"
    dtype = meta.get("dtype")
    name = str(dtype).removeprefix("torch.") if dtype is not None else "?"
    name = _SHORT_DTYPES.get(name, name) if short else name
    shape = meta["shape"] if isinstance(meta["shape"], list | tuple) else [meta["shape"]]
    return f"{name}[{', '.join(str(d) for d in shape)}]"


def meta_text(meta: Any) -> str | None:
    """The annotation of a node's recorded output: a tensor, a symbolic int, a nest of them, or a constant."""
    if isinstance(meta, Mapping):
        if "shape" in meta:
            return tensor_text(meta, short=True)
        if "sym" in meta:
            return f"Sym({meta['sym']})"
        return None
    if isinstance(meta, list | tuple):
        items = [meta_text(m) or "?" for m in meta]
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
    return repr(meta)


def top_counts(counter: Counter, limit: int = 8) -> str:
    """``"12 linear, 4 module, ... (3 more)"``: the most common items of ``counter``."""
    items = counter.most_common()
    text = ", ".join(f"{n} {k}" for k, n in items[:limit])
    return text + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def tree_lines(tree: Any, annotate: Callable[[str], str]) -> list[str]:
    """An indented text tree (``├─``/``└─``) of a drawing tree, each line ``annotate(node)``."""
    lines: list[str] = []

    def walk(node: str, prefix: str, last: bool, top: bool) -> None:
        connector = "" if top else ("└─ " if last else "├─ ")
        lines.append(f"{prefix}{connector}{annotate(node)}")
        children = list(tree.successors(node))
        inner = prefix if top else prefix + ("   " if last else "│  ")
        for i, child in enumerate(children):
            walk(child, inner, i == len(children) - 1, False)

    walk("root", "", True, True)
    return lines


def elements(records: list[Mapping[str, Any]]) -> int:
    """Total elements of tensor records (symbolic dims count as 1)."""
    total = 0
    for rec in records:
        n = 1
        for d in rec.get("shape", []):
            n *= d if isinstance(d, int) else 1
        total += n
    return total


def shared_groups(ir: IR) -> dict[str, list[str]]:
    """``{home: instance keys}`` of the shared bodies: those of a loaded file as it stores them (without expanding
    anything), else what a save would share (:meth:`common.ir.IR.shared_bodies`)."""
    groups: dict[str, list[str]] = {}
    for key, impl in ir.items():
        if impl.body is not None:
            groups.setdefault(impl.body, []).append(key)
    if groups:
        return groups
    try:
        return ir.shared_bodies()
    except IRError:  # a value no file can hold (it could not be saved either): nothing to share
        return {}


def ir_summary_lines(ir: IR, depth: int | None = None, *, collapse: bool = True) -> list[str]:
    """The lines of :func:`ir_summary` (``ir2torch show`` puts a ``file`` line before them)."""
    from .render.graphs import compact_count, hierarchy_graph

    root = ir.get("root")
    meta = root.meta if root is not None else {}
    types = Counter(impl.type for impl in ir.values())
    nodes = {key: impl.node_count for key, impl in ir.items() if impl.node_count}
    shared = shared_groups(ir)
    params = [rec for impl in ir.values() for rec in impl.state.values()
              if rec.get("kind") == "parameter" and not isinstance(rec.get("tie"), str)]
    buffers = [rec for impl in ir.values() for rec in impl.state.values() if rec.get("kind") == "buffer"]
    biggest = sorted(nodes.items(), key=lambda kv: -kv[1])[:3]
    inputs = [f"{n}: {tensor_text(a.get('meta'))}" for n, a in root.graph.nodes(data=True)
              if a.get("type") == "input"] if root is not None else []
    lines = [
        f"model            {meta.get('class', '?')} (torch {meta.get('torch_version', '?')})",
        f"implementations  {len(ir)}: {top_counts(types)}",
        f"graph nodes      {sum(nodes.values())} in {len(nodes)} graphs"
        + (f" (largest: {', '.join(f'{k} {n}' for k, n in biggest)})" if biggest else ""),
        f"parameters       {compact_count(elements(params))} elements in {len(params)} tensors; "
        f"buffers {len(buffers)} ({compact_count(elements(buffers))} elements)",
        f"inputs           {', '.join(inputs) or '-'}",
    ]
    if shared:
        listed = sorted(shared.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        lines.append(f"shared bodies    {len(shared)} for {sum(map(len, shared.values()))} instances: "
                     + ", ".join(f"{home} x{len(keys)}" for home, keys in listed[:4])
                     + (f", ... ({len(listed) - 4} more)" if len(listed) > 4 else ""))
    lines.append("tree")
    if root is None:
        return lines
    tree = hierarchy_graph(ir, depth, collapse=collapse)

    def annotate(node: str) -> str:
        name, *rest = tree.nodes[node]["label"].split("\n")
        impl = ir.get(node)
        extra = rest[1:]
        if impl is not None and impl.node_count:
            extra.insert(0, f"{impl.node_count} nodes")
        return f"{name}  {rest[0] if rest else ''}" + (f"  ({', '.join(extra)})" if extra else "")

    return lines + tree_lines(tree, annotate)


def ir_summary(ir: IR, depth: int | None = None, *, collapse: bool = True) -> str:
    """The module tree of ``ir`` with types and counts, after a header of totals.

    Args:
        ir: a module-level IR.
        depth: fold modules deeper than this into their ancestor (``root`` is 0).
        collapse: write a run of identical blocks once (``0-31 x32``); ``False`` writes every block.

    Raises:
        RenderError: ``depth`` is negative.
    """
    return "\n".join(ir_summary_lines(ir, depth, collapse=collapse))


# -- one graph as code ---------------------------------------------------------------------------
def value_text(value: Any) -> str:
    """An argument as code: ``Ref`` s by node name (``x``, ``split[1]``), other values by ``repr``."""
    if isinstance(value, Ref):
        return value.node if value.index is None else f"{value.node}[{value.index}]"
    if isinstance(value, tuple):
        inner = ", ".join(value_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, list):
        return f"[{', '.join(value_text(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, Subgraph):
        return f"<graph of {value.impl.graph.number_of_nodes()} nodes>"
    if value is TRAINING:
        return "self.training"
    return repr(value)


def call_args(impl: Implementation, name: str, attrs: Mapping[str, Any]) -> str:
    """The arguments of a node: its recorded ``args``/``kwargs``, else its in-edges by slot."""
    if "args" in attrs or "kwargs" in attrs:
        parts = [value_text(a) for a in attrs.get("args", [])]
        parts += [f"{k}={value_text(v)}" for k, v in attrs.get("kwargs", {}).items()]
        return ", ".join(parts)
    parts = []
    for src, _, edge in impl.in_edges(name):
        value = src if edge.get("src_index") is None else f"{src}[{edge['src_index']}]"
        slot = edge.get("slot")
        parts.append(f"{slot}={value}" if isinstance(slot, str) else value)
    return ", ".join(parts)


def _annotated(name: str, meta: Any) -> str:
    text = meta_text(meta) if meta is not None else None
    return f'{name}: "{text}"' if text is not None else name


def _structured(impl: Implementation, value: Any) -> Any:
    """A graph's flat output list as its module returns it, where ``meta["out_spec"]`` is one value or a tuple."""
    text = impl.meta.get("out_spec")
    if not isinstance(text, str) or not isinstance(value, list):
        return value
    try:
        spec = load_spec(text, "meta.out_spec", implementation=impl.name)
    except IRError:
        return value
    if spec.is_leaf() and len(value) == 1:
        return value[0]
    if spec.type is tuple and spec.num_children == len(value) and all(c.is_leaf() for c in spec.children()):
        return tuple(value)
    return value


def _node_line(impl: Implementation, name: str, attrs: Mapping[str, Any]) -> str:
    ntype, target = attrs.get("type", ""), str(attrs.get("implementation", ""))
    meta = attrs.get("meta")
    if ntype == "output":
        args = attrs.get("args")
        if args:
            return f"return {value_text(_structured(impl, args[0]))}"
        return f"return {call_args(impl, name, attrs)}"
    if ntype == "function":
        return f"{_annotated(name, meta)} = {target}({call_args(impl, name, attrs)})"
    if ntype == "get_attr":
        if meta is None and target in impl.state:
            meta = impl.state[target]
        kind = impl.state.get(target, {}).get("kind")
        return f"{_annotated(name, meta)} = self.{target}" + (f"  # {kind}" if kind else "")
    local = str(attrs.get("target") or (target.removeprefix(f"{impl.name}.") if impl.name != "root" else target))
    variant = f"  # variant {attrs['variant']}" if attrs.get("variant") else ""
    local = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in local.split("."))  # blocks.0 -> .blocks[0]
    return f"{_annotated(name, meta)} = self{local}({call_args(impl, name, attrs)}){variant}  # {ntype}"


def _graph_lines(impl: Implementation, indent: str = "    ") -> list[str]:
    from .order import execution_order  # (common.ir imports this module)

    nodes = [(n, impl.graph.nodes[n]) for n in execution_order(impl)]  # as it runs
    inputs = [_annotated(n, a.get("meta")) for n, a in nodes if a.get("type") == "input"]
    lines = [f"def forward(self{''.join(', ' + i for i in inputs)}):"]
    lines += [indent + _node_line(impl, n, a) for n, a in nodes if a.get("type") != "input"]
    return lines


def graph_text(impl: Implementation) -> str:
    """One implementation as code-like text: a header comment, its state records and its graph(s).

    A leaf (no graph: a handled ``torch.nn`` type) shows its attributes instead of a ``forward``.
    """
    cls = impl.meta.get("class")
    head = f"# {impl.name}: {impl.type}" + (f" ({cls})" if cls else "")
    lines = [head]
    if impl.data:
        lines.append("# attributes: " + ", ".join(f"{k}={value_text(v)}" for k, v in impl.data.items()))
    for attr, rec in impl.state.items():
        extra = f", tie={rec['tie']}" if isinstance(rec.get("tie"), str) else ""
        lines.append(f"# {rec.get('kind', 'state')} {attr}: {tensor_text(rec, short=True)}{extra}")
    if impl.graph.number_of_nodes() == 0:
        lines.append("# no graph: rebuilt by the handler of its type")
        return "\n".join(lines)
    lines += _graph_lines(impl)
    for i, variant in enumerate(impl.variants, start=1):
        lines += ["", f"# variant {i} (per-call graph)", *_graph_lines(variant)]
    return "\n".join(lines)
