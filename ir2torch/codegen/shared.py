"""Generate and compile a ``forward`` once per distinct graph of one conversion.

A model with 80 identical decoder layers rebuilds 80 implementations whose fx graphs differ in nothing that
reaches the generated source: torch.fx would write, and Python compile, the same ``forward`` 80 times (most of
a meta rebuild's time at Llama-70B dimensions). :class:`CodeCache` keys each graph on a structural key that
this module computes from the fx graph the rebuilder built (every node's op, name, target, arguments and
type, and the calling convention's inputs) and gives a graph whose key was seen before the source and
compiled function of the first one.

Only the generated code is shared. Every rebuilt module stays its own ``GraphModule`` (its own class, graph,
parameters, hooks and per-call wrapper); its ``forward`` is its own function object made from the shared code
object, with the same globals; ``code``, ``print_readable()``, ``recompile()`` and ``inspect.signature`` work
as for a module fx compiled itself, and recompiling one module changes only that one.

The key decides only *whether* code is reused; it is never turned into code. Two graphs share code only when
every string fx pastes into source is equal, every constant is of the same type and spelling, and every called
object is the same object (anything this module does not know how to compare counts as distinct).
"""

from __future__ import annotations

import collections
import os
import types
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.fx.experimental import _config as fx_experimental_config
from torch.fx.graph import CodeGen, _PyTreeCodeGen
from torch.fx.graph_module import _WrappedCall
from torch.fx.immutable_collections import immutable_dict, immutable_list

from common.treespec import load_spec

#: Environment switches under which fx writes node metadata (which the key leaves out) into the source.
_META_SWITCHES = ("FX_GRAPH_SHOW_META",)


class _Same:
    """Key part equal only to a part wrapping the very same object (and keeping it alive)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


_PLAIN = (bool, int, str, type(None))


def value_key(value: Any) -> Hashable:
    """A key equal for two argument values that fx spells, and binds, identically in generated source."""
    kind = type(value)
    if kind is fx.Node:
        return ("node", value.name)
    if kind in _PLAIN:
        return (kind, value)
    if kind in (float, complex):
        return (kind, repr(value))  # tells -0.0 from 0.0 and compares NaN equal to itself
    if kind in (tuple, list, immutable_list):  # fx keeps a node's lists as ``immutable_list``s
        return (kind, tuple(value_key(v) for v in value))
    if kind in (dict, immutable_dict):
        return (dict, tuple((value_key(k), value_key(v)) for k, v in value.items()))
    if kind is slice:
        return (slice, value_key(value.start), value_key(value.stop), value_key(value.step))
    if kind is torch.device:
        return (torch.device, str(value))
    return _Same(value)  # dtypes, layouts, Ellipsis (singletons) and any other object: shared only with itself


def _spec_key(spec: Any) -> Hashable:
    if spec is None:
        return None
    if spec.is_leaf():
        return ("leaf",)
    return (_Same(spec.type), value_key(spec.context), tuple(_spec_key(c) for c in spec.children()))


def _known_spec_key(spec: Any, specs: dict[int, tuple[Any, Hashable]] | None) -> Hashable:
    """:func:`_spec_key`, remembered in ``specs`` by the spec's identity (the spec is kept there, so its ``id`` is not
    reused; a ``TreeSpec`` is immutable)."""
    if specs is None or spec is None:
        return _spec_key(spec)
    known = specs.get(id(spec))
    if known is None:
        known = specs[id(spec)] = (spec, _spec_key(spec))
    return known[1]


def _codegen_key(codegen: CodeGen, specs: dict[int, tuple[Any, Hashable]] | None = None) -> Hashable | None:
    """What of the calling convention reaches the source; ``None`` for a code generator this module does not know.
    ``specs``: spec keys already computed (:func:`_known_spec_key`)."""
    from ir2torch.codegen.source import SafeCodeGen, SafePyTreeCodeGen

    if type(codegen) in (CodeGen, SafeCodeGen):
        return ("plain",)
    if type(codegen) is SafePyTreeCodeGen:
        info = codegen.pytree_info
        params = tuple((p.name, p.kind, value_key(p.default)) for p in codegen.parameters)
        return ("pytree", tuple(info.orig_args), _known_spec_key(info.in_spec, specs),
                _known_spec_key(info.out_spec, specs), params)
    return None


def graph_key(graph: fx.Graph, specs: dict[int, tuple[Any, Hashable]] | None = None) -> Hashable | None:
    """The structural key of ``graph``'s generated code, or ``None`` when it must be generated on its own.
    ``specs``: keys of calling-convention specs already computed (by their identity; a :class:`CodeCache`'s)."""
    if fx_experimental_config.enrich_profiler_metadata or any(os.environ.get(s, "0") == "1" for s in _META_SWITCHES):
        return None  # fx then writes node metadata into the source
    codegen = _codegen_key(graph._codegen, specs)
    if codegen is None:
        return None
    nodes = []
    for node in graph.nodes:
        target = node.target if isinstance(node.target, str) else _Same(node.target)
        nodes.append((node.op, node.name, target, value_key(node.args), value_key(node.kwargs),
                      _Same(node.type), bool(node.meta.get("is_wrapped", False))))
    return codegen, tuple(nodes)


@dataclass(frozen=True)
class _Entry:
    """One generated and compiled ``forward``, and what fx keeps of its source on the module."""

    key: Hashable
    src: str
    lineno_map: Any
    prologue_start: int
    forward: Callable[..., Any]


class CodeCache:
    """Generated ``forward``s of one conversion by :func:`graph_key` (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry] = {}
        #: instances of shared bodies built so far, by :func:`ir2torch.rebuild.instances.template_key`
        self.templates: dict[Hashable, Any] = {}
        self._specs: dict[tuple[str, str], Any] = {}
        self._spec_keys: dict[int, tuple[Any, Hashable]] = {}
        #: what ``function`` nodes call, by allow-list, target, keyword names and positional count
        #: (:meth:`ir2torch.rebuild.graphs.GraphBuilder.function`)
        self.functions: dict[tuple[int, Any, tuple, int], Any] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def spec(self, text: Any, field: str, *, implementation: str | None = None) -> Any:
        """``common.treespec.load_spec(text, field)``, read once per text in this conversion (repeated layers share
        their calling conventions' texts; a ``TreeSpec`` is immutable, and reads the same while nothing registers
        or removes pytree types). A failure is not remembered: it raises naming each ``implementation``.

        Raises:
            IRFormatError: as ``load_spec``.
        """
        if not isinstance(text, str):
            return load_spec(text, field, implementation=implementation)
        spec = self._specs.get((field, text))
        if spec is None:
            spec = self._specs[(field, text)] = load_spec(text, field, implementation=implementation)
        return spec

    def install(self, gm: fx.GraphModule, graph: fx.Graph, compile_one: Callable[[], Any],
                defer_one: Callable[[], Any] | None = None) -> None:
        """Make ``graph`` ``gm``'s graph: with the code of an earlier graph of the same key, else through
        ``compile_one()`` (fx's own code generation, which sets ``gm.graph``), remembering the result. A graph
        large enough for :func:`ir2torch.codegen.lazy.wants_deferral` goes through ``defer_one()`` instead: its code
        is made at first use, and shared with no other graph (computing its key costs about a tenth of writing its
        code, and such graphs are seldom repeated)."""
        from ir2torch.codegen.lazy import wants_deferral

        if defer_one is not None and wants_deferral(graph):
            defer_one()
            self.misses += 1
            return
        key = graph_key(graph, self._spec_keys)
        entry = self._entries.get(key) if key is not None else None
        if entry is None:
            compile_one()
            self.misses += 1
            if key is not None:
                self._entries[key] = _Entry(key, gm._code, gm._lineno_map, gm._prologue_start, type(gm).forward)
            return
        self.hits += 1
        adopt(gm, graph, entry)

    def entry_of(self, graph: fx.Graph) -> _Entry | None:
        """The code entry installed for ``graph``'s key (``None``: no key, or its code is deferred)."""
        key = graph_key(graph, self._spec_keys)
        return self._entries.get(key) if key is not None else None

    def function(self, graph: fx.Graph, compile_one: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        """The generated ``forward`` of ``graph`` as a plain function (a per-call graph's), compiled at most once
        per key."""
        key = graph_key(graph, self._spec_keys)
        entry = self._entries.get(("function", key)) if key is not None else None
        if entry is not None:
            self.hits += 1
            return entry.forward
        fn = compile_one()
        self.misses += 1
        if key is not None:
            self._entries[("function", key)] = _Entry(key, "", None, 0, fn)
        return fn


def adopt(gm: fx.GraphModule, graph: fx.Graph | None, entry: _Entry, codegen: CodeGen | None = None) -> None:
    """What ``gm.graph = graph`` (fx's ``recompile``) does, with ``entry``'s source and compiled code. ``graph``
    ``None``: the caller makes ``gm``'s graph, with calling convention ``codegen``
    (:mod:`ir2torch.rebuild.instances`)."""
    # plain values: ``nn.Module.__setattr__`` would put them in the instance's dictionary after checks that cost more
    # than the rest here (no parameter, buffer or child can have these names: common.names.module_attributes;
    # ``_in_spec`` and ``_out_spec`` are not among them, and go through the checks)
    attrs = gm.__dict__
    if graph is not None:
        attrs["_graph"] = graph
        graph.owning_module = gm
        codegen = graph._codegen
    if isinstance(codegen, _PyTreeCodeGen):
        gm._in_spec = codegen.pytree_info.in_spec
        gm._out_spec = codegen.pytree_info.out_spec
    attrs["_code"] = entry.src
    attrs["_lineno_map"] = entry.lineno_map
    attrs["_prologue_start"] = entry.prologue_start
    cls = type(gm)
    cls.forward = copy_function(entry.forward)
    cls_call = cls.__call__ if "__call__" in vars(cls) else None
    if "_wrapped_call" not in vars(cls):
        cls._wrapped_call = _WrappedCall(cls, cls_call)
    gm._recompile_submodules()

    def call_wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped_call(self, *args, **kwargs)

    cls.__call__ = call_wrapped


def _store_graph(self: fx.GraphModule, graph: fx.Graph) -> None:
    """The constructor's ``self.graph = graph`` in :func:`placeholder_module`: store it, generate nothing."""
    if not isinstance(graph, fx.Graph):
        raise AssertionError(f"Expected a Graph instance, but got {type(graph)}")
    self.__dict__["_graph"] = graph  # what ``nn.Module.__setattr__`` does with a plain value, without its checks
    graph.owning_module = self


#: The constructor's ``graph`` setter while :func:`placeholder_module` runs it: stores the graph, generates nothing.
_STORE_GRAPH = property(fx.GraphModule.graph.fget, _store_graph)  # type: ignore[attr-defined]
#: The ``root`` fx's constructor is given: a module with nothing to copy (an empty graph names nothing of it).
_NO_ROOT = nn.Module()


def placeholder_module(class_name: str, *, graph: bool = True) -> fx.GraphModule:
    """``fx.GraphModule(nn.Module(), fx.Graph(), class_name=class_name)`` without fx's code generation and compilation
    of the empty graph, for a caller that makes another graph the module's graph right after (``gm.graph = g``, or
    :meth:`CodeCache.install`), before the module is used: that step sets everything the skipped one would have
    set (source, ``forward``, ``__call__``). At 70B dimensions the skipped compilations were 11% of a meta rebuild.

    The module is an instance of the class fx's ``__new__`` makes for each ``GraphModule`` (a fresh
    ``GraphModuleImpl`` of ``fx.GraphModule``, named ``class_name``), made once: fx's constructor runs on it while
    that class's ``graph`` setter only stores the graph, and the setter is removed right after, so nothing of it
    remains: ``gm.graph = g``, copies, deep copies and pickles are fx's.

    ``graph=False``: the module holds no graph yet, not even an empty one (its caller gives it one at once, as
    :func:`ir2torch.rebuild.instances.adopt_template` does; an empty graph made only to be dropped is garbage of a
    reference
    cycle that only the cyclic collector frees, about ten objects per module).
    """
    gm = fx.GraphModule.__new__(fx.GraphModule)  # an instance of a new class, not initialised yet
    cls = type(gm)
    fresh = _fresh_state()
    if fresh is not None:  # what the constructor below sets, without running it (see :func:`_fresh_state`)
        cls.__name__ = class_name
        attrs = gm.__dict__
        for name, value in fresh:
            attrs[name] = value if type(value) in _IMMUTABLE else type(value)()
        if graph:
            empty = attrs["_graph"] = fx.Graph()
            empty.owning_module = gm
        else:
            del attrs["_graph"]
        return gm
    cls.graph = _STORE_GRAPH
    try:
        fx.GraphModule.__init__(gm, _NO_ROOT, fx.Graph(), class_name=class_name)
    finally:
        del cls.graph
    return gm


_IMMUTABLE = (bool, int, float, str, type(None))
_EMPTY_CONTAINERS = (dict, collections.OrderedDict, list, set)
_FRESH: list[tuple[tuple[str, Any], ...] | None] = []


def _fresh_state() -> tuple[tuple[str, Any], ...] | None:
    """The instance attributes fx's constructor gives a ``GraphModule`` of an empty graph and an empty root, in
    order, when each is an immutable value or an empty ``dict``/``OrderedDict``/``list``/``set`` (a new one of the
    same type is then exactly what the constructor would make); ``None`` if any is not (a torch version whose
    modules hold something else), and :func:`placeholder_module` runs the constructor each time. Read once, from
    one module made by the constructor. The graph is set apart (each module gets a new empty one)."""
    if not _FRESH:
        probe = fx.GraphModule.__new__(fx.GraphModule)
        type(probe).graph = _STORE_GRAPH
        try:
            fx.GraphModule.__init__(probe, _NO_ROOT, fx.Graph(), class_name="Probe")
        finally:
            del type(probe).graph
        items = [(k, v) for k, v in probe.__dict__.items()]
        known = all(k == "_graph" or type(v) in _IMMUTABLE or (type(v) in _EMPTY_CONTAINERS and not v)
                    for k, v in items)
        _FRESH.append(tuple((k, None if k == "_graph" else v) for k, v in items) if known else None)
    return _FRESH[0]


def copy_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object running ``fn``'s code with its globals and defaults (its own attributes)."""
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new


__all__ = ["CodeCache", "adopt", "copy_function", "graph_key", "placeholder_module", "value_key"]
