"""One module instance of the IR: :class:`Implementation`, its graph, state records and plain-dict form.

:class:`~common.ir.IR` maps implementation keys to these (``common.ir`` re-exports the class: ``from common.ir import
Implementation`` keeps working). ``impl.print_readable()`` prints the graph as code through the ``graph_text``
presenter (:mod:`common.presenters`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx

from .bodies import copy_value, relocated_graph
from .errors import DanglingEdgeError, IRFormatError
from .presenters import presenter
from .schema import (
    DEFAULT_MAX_NODES,
    RESERVED_KEYS,
    Slot,
    ValueFn,
    _same,
    check_node_budget,
    expect,
    parse_edges,
    parse_nodes,
    parse_state,
    parse_variants,
)
from .values import values_equal

__all__ = ["Implementation"]

_RESERVED = frozenset(RESERVED_KEYS)
#: The graph an unexpanded instance holds until it expands (frozen: nothing may add to it).
_NO_GRAPH = nx.freeze(nx.MultiDiGraph())


class Implementation:
    """One module instance of the IR: attributes, graph, state records.

    Args:
        name: the implementation key (``"root"`` or a dotted module path).
        type: the IR type (``"linear"``, ``"module"``, a user's type).
        data: attributes (JSON-able values, see :mod:`common.values`).
        graph: the graph; an empty ``MultiDiGraph`` when omitted.
        state: ``{attribute name: record}`` of parameters/buffers/constants it owns.
        aliases: other module paths of the same instance.
        meta: structural facts (module class, calling convention, ...).
    """

    def __init__(
        self,
        name: str,
        type: str,
        data: Mapping[str, Any] | None = None,
        graph: nx.MultiDiGraph | None = None,
        *,
        state: Mapping[str, Mapping[str, Any]] | None = None,
        aliases: list[str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.type = type
        self.data: dict[str, Any] = dict(data or {})
        self._graph: nx.MultiDiGraph = graph if graph is not None else nx.MultiDiGraph()
        self.state: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (state or {}).items()}
        self.aliases: list[str] = list(aliases or [])
        self.meta: dict[str, Any] = dict(meta or {})
        self._variants: list[Implementation] = []
        #: ``(body, home)`` while this is an unexpanded instance of a shared body (:mod:`common.bodies`)
        self._shared: tuple[Implementation, str] | None = None

    # -- graphs, and shared bodies -------------------------------------------------------
    @property
    def graph(self) -> nx.MultiDiGraph:
        """The graph: nodes in execution order, edges carrying values into argument slots. Reading it expands an
        instance of a shared body into a graph of its own (:attr:`body` becomes ``None``)."""
        if self._shared is not None:
            self._expand()
        return self._graph

    @graph.setter
    def graph(self, graph: nx.MultiDiGraph) -> None:
        if self._shared is not None:
            self._expand()
        self._graph = graph

    @property
    def variants(self) -> list[Implementation]:
        """Further graphs of a module whose calls trace differently (a call node's ``variant`` picks one; absent or
        0: :attr:`graph`); each shares this implementation's name, type and state. Reading them expands an
        instance of a shared body, as :attr:`graph` does."""
        if self._shared is not None:
            self._expand()
        return self._variants

    @variants.setter
    def variants(self, variants: list[Implementation]) -> None:
        if self._shared is not None:
            self._expand()
        self._variants = variants

    @property
    def node_count(self) -> int:
        """Nodes of the main graph, without expanding an instance of a shared body."""
        return (self._graph if self._shared is None else self._shared[0]._graph).number_of_nodes()

    @property
    def variant_count(self) -> int:
        """``len(variants)``, without expanding an instance of a shared body."""
        return len(self._variants if self._shared is None else self._shared[0]._variants)

    @property
    def body(self) -> str | None:
        """The home key of the shared body this instance still expands from (a loaded file stores alike
        instances once, see :mod:`common.bodies`), or ``None`` once it has a graph of its own."""
        return None if self._shared is None else self._shared[1]

    @property
    def shared_body(self) -> Implementation | None:
        """The body this instance expands from (an implementation named after its home; read it, do not change
        it), or ``None``."""
        return None if self._shared is None else self._shared[0]

    @classmethod
    def instance_of(cls, key: str, body: Implementation, *, aliases: list[str] | None = None,
                    meta: Mapping[str, Any] | None = None) -> Implementation:
        """An unexpanded instance ``key`` of ``body`` (whose name is its home key): the body's type, attributes and
        state records (copied), its ``meta`` with the entries of ``meta`` replacing those of the same key (in the
        body's order; others after); the graphs are the body's, relocated from the
        home to ``key`` when first read."""
        own = dict(meta or {})
        merged = {k: own.pop(k) if k in own else copy_value(v) for k, v in body.meta.items()}
        merged.update(own)
        # no graph of its own until expanded (every read of ``_graph`` expands first, or reads the body's)
        impl = cls(key, body.type, copy_value(body.data), _NO_GRAPH, state=copy_value(body.state), aliases=aliases,
                   meta=merged)
        impl._shared = (body, body.name)
        return impl

    def _expand(self) -> None:
        body, home = self._shared  # type: ignore[misc]
        self._shared = None
        self._graph = relocated_graph(body._graph, home, self.name)
        self._variants = []
        for variant in body._variants:
            own = Implementation(self.name, self.type)
            own.state = self.state
            own._graph = relocated_graph(variant._graph, home, self.name)
            self._variants.append(own)

    def add_variant(self) -> Implementation:
        """Append an empty per-call graph (returned; fill its ``graph``) and return it."""
        variant = Implementation(self.name, self.type)
        variant.state = self.state
        self.variants.append(variant)
        return variant

    def graphs(self) -> list[Implementation]:
        """This implementation and its variants: every graph a call of it may run."""
        return [self, *self.variants]

    # -- building graphs -----------------------------------------------------------------
    def add_node(self, name: str, type: str, implementation: str | None = None, /, **fields: Any) -> str:
        """Append a node (nodes keep insertion order, which is their execution order).

        ``fields`` may use any name (``self``, ``name``, ...): they are stored as data.
        """
        attrs: dict[str, Any] = {"type": type}
        if implementation is not None:
            attrs["implementation"] = implementation
        attrs.update(fields)
        self.graph.add_node(name)
        self.graph._node[name].update(attrs)  # ``graph.nodes[name]`` without the view
        return name

    def add_edge(self, src: str, dst: str, *, slot: Slot | None = None, src_index: int | None = None) -> int:
        """Connect ``src``'s output (or its ``src_index``-th item) to ``dst``'s argument ``slot``.

        Raises:
            DanglingEdgeError: ``src`` or ``dst`` is not a node yet.
        """
        for end in (src, dst):
            if end not in self.graph:
                raise DanglingEdgeError(
                    f"edge {src!r} -> {dst!r} names missing node {end!r}",
                    implementation=self.name,
                    hint="add the node before the edge",
                )
        attrs: dict[str, Any] = {}
        if slot is not None:
            attrs["slot"] = slot
        if src_index is not None:
            attrs["src_index"] = src_index
        return self.graph.add_edge(src, dst, **attrs)

    def _ordered_edges(self) -> list[tuple[str, str, int, dict[str, Any]]]:
        """Edges grouped by destination (in node order), each group in in-edge order.

        Re-adding edges in this order rebuilds the same in-edge order, so slotless edges
        keep feeding the same positional arguments after a save/load.
        """
        return [(u, v, k, d) for v in self.graph.nodes for u, _, k, d in self.graph.in_edges(v, keys=True, data=True)]

    @property
    def nodes(self) -> list[str]:
        """Node names in order."""
        return list(self.graph.nodes)

    def node(self, name: str) -> dict[str, Any]:
        """The attribute dict of node ``name`` (``type``, ``implementation``, ...)."""
        try:
            return self.graph._node[name]  # ``graph.nodes[name]`` without the view (made once per graph)
        except (KeyError, TypeError):
            return self.graph.nodes[name]  # networkx's own error

    def in_edges(self, dst: str) -> list[tuple[str, int, dict[str, Any]]]:
        """``(src, key, attrs)`` of the edges into ``dst``, in graph order."""
        # the order of ``graph.in_edges(dst, keys=True, data=True)``, read from the adjacency itself (the edge
        # views cost more than the edges when a large IR is rebuilt)
        return [(u, k, d) for u, keyed in self.graph._pred[dst].items() for k, d in keyed.items()]

    # -- plain dict form -----------------------------------------------------------------
    def to_dict(self, *, value_fn: ValueFn = _same, edge_list: bool = False) -> dict[str, Any]:
        """The plain dict of this implementation (attributes at the top level)."""
        where = f"implementations[{self.name!r}]"
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        for key, value in self.data.items():
            out[key] = value_fn(value, f"{where}.{key}")
        nodes: dict[str, Any] = {}
        for name, attrs in self.graph.nodes(data=True):
            node = {"name": name}
            node.update({k: v if k in ("type", "implementation") else value_fn(v, f"{where}.nodes.{name}.{k}")
                         for k, v in attrs.items()})
            nodes[name] = node
        out["nodes"] = nodes
        edges_list = []
        edges_map: dict[tuple, Any] = {}
        for src, dst, key, attrs in self._ordered_edges():
            edge = {"src": src, "dst": dst}
            for k, v in attrs.items():
                edge[k] = value_fn(list(v) if k == "slot" and isinstance(v, tuple) and edge_list else v, where)
            edges_list.append(edge)
            edges_map[(src, dst) if key == 0 else (src, dst, key)] = edge
        out["edges"] = edges_list if edge_list else edges_map
        if self.state:
            out["state"] = {k: {f: value_fn(v, f"{where}.state.{k}.{f}") for f, v in rec.items()}
                            for k, rec in self.state.items()}
        if self.variants:
            out["variants"] = [{k: v for k, v in variant.to_dict(value_fn=value_fn, edge_list=edge_list).items()
                                if k in ("nodes", "edges")} for variant in self.variants]
        if self.aliases:
            out["aliases"] = list(self.aliases)
        if self.meta:
            out["meta"] = {k: value_fn(v, f"{where}.meta.{k}") for k, v in self.meta.items()}
        return out

    @classmethod
    def from_dict(cls, key: str, d: Mapping[str, Any], *, value_fn: ValueFn = _same,
                  max_nodes: int | None = DEFAULT_MAX_NODES) -> Implementation:
        """Parse one implementation's plain dict (see :meth:`IR.from_dict`).

        ``max_nodes``: most nodes of its graph and variants together (``None``: no limit), counted before any
        is built.

        Raises:
            IRFormatError: a field is missing or of the wrong type, or the graphs exceed ``max_nodes``.
            DanglingEdgeError: an edge names a node that is not in ``nodes``.
        """
        where = f"implementations[{key!r}]"
        expect(d, Mapping, where, key)
        check_node_budget({key: d}, max_nodes)
        if "name" in d and d["name"] != key:
            raise IRFormatError(
                f"name {d['name']!r} differs from its key {key!r}",
                implementation=key,
                hint="an implementation's name must equal its key in the IR",
            )
        itype = d.get("type")
        if not isinstance(itype, str) or not itype:
            raise IRFormatError("missing or empty 'type'", implementation=key, key=f"{where}.type",
                                hint="every implementation needs a type string such as 'linear' or 'module'")
        data = {k: value_fn(v, f"{where}.{k}") for k, v in d.items() if k not in _RESERVED}
        for k in data:
            if not isinstance(k, str):
                raise IRFormatError(f"attribute name {k!r} is not a string", implementation=key)
        impl = cls(key, itype, data)
        parse_nodes(impl, d.get("nodes", {}), value_fn, where)
        parse_edges(impl, d.get("edges", {}), value_fn, where)
        impl.state = parse_state(d.get("state", {}), value_fn, where, key)
        parse_variants(impl, d.get("variants", []), value_fn, where)
        aliases = d.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
            raise IRFormatError("'aliases' must be a list of module paths", implementation=key, key=f"{where}.aliases")
        impl.aliases = list(aliases)
        meta = d.get("meta", {})
        expect(meta, Mapping, f"{where}.meta", key)
        impl.meta = {str(k): value_fn(v, f"{where}.meta.{k}") for k, v in meta.items()}
        return impl

    # -- comparison ----------------------------------------------------------------------
    def _canonical(self) -> tuple:
        nodes = [(n, dict(a)) for n, a in self.graph.nodes(data=True)]
        edges = sorted(
            ((u, v, repr(sorted(d.items(), key=lambda kv: kv[0]))) for u, v, d in self.graph.edges(data=True)),
        )
        variants = [v._canonical()[3:5] for v in self.variants]
        return (self.name, self.type, self.data, nodes, edges, self.state, self.aliases, self.meta, variants)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Implementation):
            return NotImplemented
        return values_equal(self._canonical(), other._canonical())

    def print_readable(self, print_output: bool = True) -> str:
        """Print (unless ``print_output`` is false) and return this implementation's graph as code-like text, with
        shapes and dtypes where the IR records them (:func:`common.textview.graph_text`)."""
        text = presenter("graph_text")(self)
        if print_output:
            print(text)
        return text

    def __repr__(self) -> str:
        return (f"Implementation({self.name!r}, type={self.type!r}, "
                f"{self.graph.number_of_nodes()} nodes, {self.graph.number_of_edges()} edges)")

