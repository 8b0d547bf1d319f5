"""Hypothesis strategies that *construct* valid IRs (never filter for them), and mutate
their JSON documents into (mostly) invalid ones.

- :func:`ir_values`: any value the IR can hold (tagged JSON round trip included);
- :func:`irs`: random valid :class:`~common.ir.IR` objects: a root graph over inputs,
  ATen/operator function nodes, calls of leaf and nested implementations, ``get_attr``
  of recorded state, explicit ``args``/``kwargs`` templates with :class:`Ref`\\ s or
  slotless edges, parallel edges (``x + x``);
- :func:`ir_documents`: the JSON document (parsed form) of such an IR;
- :func:`mutated_documents`: JSON *text* of a document after random damage.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

import torch
from hypothesis import strategies as st

from common.ir import IR, NODE_KINDS, RESERVED_KEYS, Implementation
from common.names import is_component, is_identifier
from common.serialize import ir_to_document
from common.values import Ref

_FUNCTIONS = ("aten.add.Tensor", "aten.relu.default", "aten.mul.Tensor", "aten.cat.default", "operator.getitem")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool, torch.complex64)

names = st.text(
    alphabet=st.characters(categories=("L", "N"), include_characters="_-$ é中"), min_size=1, max_size=12
)
#: names of attributes, arguments and modules (no keyword, no attribute of nn.Module such as ``eval``)
identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(is_identifier).filter(is_component)


@functools.cache  # one strategy object: hypothesis validates each new one again (a recursive one slowly)
def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
        st.sampled_from(_DTYPES),
        st.sampled_from([torch.device("cpu"), torch.device("meta")]),
        st.sampled_from([torch.contiguous_format, torch.channels_last, torch.strided]),
        st.builds(slice, st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5), st.none() | st.integers(1, 3)),
        st.just(Ellipsis),
        st.complex_numbers(allow_nan=False, allow_infinity=False),
    )


@functools.cache  # the same strategy object per ``max_leaves``: built and validated once
def ir_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Values an IR may hold in attributes, node fields and ``meta``."""
    return st.recursive(
        _scalars(),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=6), children, max_size=4),  # keys may start with '$'
            st.dictionaries(st.integers(-3, 3), children, max_size=3),
        ),
        max_leaves=max_leaves,
    )


def _state_record(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["parameter", "buffer", "constant"]))
    rec: dict[str, Any] = {
        "kind": kind,
        "shape": draw(st.lists(st.integers(0, 64), max_size=4)),
        "dtype": draw(st.sampled_from(_DTYPES)),
    }
    if kind == "parameter":
        rec["requires_grad"] = draw(st.booleans())
    if kind == "buffer":
        rec["persistent"] = draw(st.booleans())
    return rec


# drawn names must not collide with the fixed ones ("output", "in_<i>", "attr_<id>"): add_node would
# silently retype that node (an "in_0" call fed by itself is a cycle); the filter almost never rejects
_NODE_NAMES = st.lists(names.filter(lambda x: x != "output" and not x.startswith(("in_", "attr_"))),
                       min_size=8, max_size=8, unique=True)


@st.composite
def _graph(draw: st.DrawFn, impl: Implementation, callees: list[Implementation]) -> None:
    """Fill ``impl.graph`` with a random valid DAG calling ``callees``."""
    node_names = draw(_NODE_NAMES)
    pool = iter(node_names)
    available: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        name = f"in_{i}"
        impl.add_node(name, "input", "input")
        available.append(name)
    state_names = list(impl.state)
    if state_names and draw(st.booleans()):
        name = f"attr_{draw(identifiers)}"
        impl.add_node(name, "get_attr", draw(st.sampled_from(state_names)))
        available.append(name)
    for _ in range(draw(st.integers(0, 5))):
        name = next(pool)
        if callees and draw(st.booleans()):
            callee = draw(st.sampled_from(callees))
            impl.add_node(name, callee.type, callee.name)
        else:
            impl.add_node(name, "function", draw(st.sampled_from(_FUNCTIONS)))
        sources = draw(st.lists(st.sampled_from(available), min_size=1, max_size=3))
        if draw(st.booleans()):  # explicit template with Refs, literals and kwargs
            args: list[Any] = []
            for pos, src in enumerate(sources):
                index = draw(st.none() | st.integers(0, 2))
                args.append(Ref(src, index))
                impl.add_edge(src, name, slot=pos, src_index=index)
            args.append(draw(ir_values(max_leaves=3)))
            kw_src = draw(st.sampled_from(available))
            impl.graph.nodes[name]["args"] = args
            impl.graph.nodes[name]["kwargs"] = {"alpha": draw(st.integers(-3, 3)), "other": Ref(kw_src)}
            impl.add_edge(kw_src, name, slot="other")
        else:  # slotless edges in order (parallel edges included, as in x + x)
            for src in sources:
                impl.add_edge(src, name)
        if draw(st.booleans()):
            impl.graph.nodes[name]["meta"] = {"shape": [2, 3], "dtype": torch.float32}
        available.append(name)
    impl.add_node("output", "output", "output")
    for src in draw(st.lists(st.sampled_from(available), min_size=1, max_size=3, unique=True)):
        impl.add_edge(src, "output")


@st.composite
def irs(draw: st.DrawFn) -> IR:
    """A random valid IR (it passes :func:`common.validate.validate`)."""
    ir = IR()
    # a leaf type equal to a node kind ("output", ...) is invalid: its call nodes would read as that kind
    leaf_types = draw(st.lists(names.filter(lambda t: t not in NODE_KINDS), min_size=1, max_size=3, unique=True))
    root = ir.add(Implementation("root", "module", meta={"class": "tests.Model"}))
    block_key = draw(identifiers)
    block = ir.add(Implementation(block_key, "module"))
    leaves = []
    for i in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from(["root", block_key]))
        key = f"leaf{i}" if parent == "root" else f"{block_key}.leaf{i}"
        data = draw(_LEAF_DATA)
        aliases = [f"alias.a{i}_{s}" for s in draw(_ALIAS_SUFFIXES)]
        leaves.append(ir.add(Implementation(key, draw(st.sampled_from(leaf_types)), data, aliases=aliases)))
    for impl in (root, block):
        impl.state = {draw(identifiers): _state_record(draw) for _ in range(draw(st.integers(0, 2)))}
    block_callees = [leaf for leaf in leaves if leaf.name.startswith(block_key + ".")]
    draw(_graph(block, block_callees))
    root_callees = [leaf for leaf in leaves if "." not in leaf.name] + [block]
    draw(_graph(root, root_callees))
    return ir


_RESERVED = set(RESERVED_KEYS)
_LEAF_DATA = st.dictionaries(identifiers.filter(lambda k: k not in _RESERVED), ir_values(6), max_size=4)
_ALIAS_SUFFIXES = st.lists(identifiers, max_size=2, unique=True)


@st.composite
def ir_documents(draw: st.DrawFn) -> dict[str, Any]:
    """The parsed JSON document of a random valid IR."""
    return json.loads(json.dumps(ir_to_document(draw(irs()))))


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


_JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10),
    st.just([]), st.just({}), st.just(10**300), st.just(-(10**300)), st.just(1e308), st.just("os.system"),
    st.just({"$dtype": "nope"}), st.just({"$tuple": 3}), st.just({"$ref": 5}), st.just({"$what": 1}),
    st.just({"$float": "huge"}), st.just([["a"]]), st.just("\u202e\u0000名"),
)  # fmt: skip
# st.just returns the same object on every draw: copy it, or a mutation into a drawn [] or {} would change
# the literal for every later example (a document growing across examples, "inconsistent data generation")
_JUNK = _JUNK.map(copy.deepcopy)


@st.composite
def mutated_documents(draw: st.DrawFn) -> str:
    """JSON text of a valid IR document after 1-3 random mutations (possibly still valid)."""
    doc = draw(ir_documents())
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["drop", "replace", "rename", "retype", "dup"]))
        if not path:
            doc = draw(_JUNK) if op == "replace" else doc
            continue
        *head, last = path
        parent = doc
        for p in head:
            parent = parent[p]
        if op == "drop":
            del parent[last]
        elif op == "replace":
            parent[last] = draw(_JUNK)
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(names)] = parent.pop(last)
        elif op == "retype":
            value = parent[last]
            parent[last] = [value] if not isinstance(value, list) else {"x": value}
        elif op == "dup" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
    text = json.dumps(doc, ensure_ascii=False)
    if draw(st.integers(0, 9)) == 0:  # text-level damage: truncation or a huge literal
        cut = draw(st.integers(0, max(len(text) - 1, 0)))
        text = text[:cut] if draw(st.booleans()) else text[:cut] + "1" * 5000 + text[cut:]
    return text


def is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
