"""Rebuild the instances of one shared body from the first one built (a template), not each from the IR again.

The unexpanded instances of a shared body (:mod:`common.bodies`: eighty decoder layers, 10**5 small blocks)
rebuild into ``GraphModule``\\ s whose graphs are built from the same body with the same calling convention: the
same fx graph, the same generated code (:mod:`ir2torch.codegen.shared`), the same per-call graphs, input check and
constant-folding plan. :func:`ir2torch.rebuild.graphs.graph_module` builds the first instance of each
:func:`template_key` in full and records it here; every later instance of that key gets

- its own module, class, parameters and buffers (made as for any implementation, by the caller);
- its own fx graph: a node-by-node copy of the template's (names, targets, arguments, types and node metadata, as
  ``Graph.node_copy`` copies them) with its own calling convention, a new one equal to the template's (made from
  the same ``meta`` entries, which are part of the key: :func:`_own_convention`);
- the template's compiled code, per-call graphs, check and fold plan (compiled or immutable objects, shared as
  :mod:`ir2torch.codegen.shared` shares code between identical graphs), and error reports naming itself.

Building the graph again, checking its strings and computing its key would give exactly the template's (the
strings were checked when the template was built, the copy has the same ones); the copy skips that work. The key
holds everything of an instance that graph building reads: the body itself (by identity), and the ``meta``
entries that make the calling convention and the class name. An instance of another key, the root (its input
guard) and any graph whose code is deferred (:mod:`ir2torch.codegen.lazy`) are built in full.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from torch import fx

from common.ir import Implementation
from ir2torch.codegen.fold_cache import FOLD_ATTR
from ir2torch.codegen.fold_cache import install as install_fold
from ir2torch.codegen.module_call import report_errors
from ir2torch.codegen.shared import CodeCache, adopt
from ir2torch.codegen.source import SafeCodeGen, SafePyTreeCodeGen, calling_convention

#: The ``meta`` entries graph building reads (class name, calling convention, signature check).
_META_READ = ("class", "in_spec", "out_spec", "forward_arg_names", "parameters")


@dataclass(frozen=True)
class Template:
    """What instances of one key share: a copy of the first instance's graph (no module's: the source of later
    instances' copies), its code entry, checks, per-call graphs and fold plan."""

    body: Implementation
    graph: fx.Graph
    entry: Any  # ir2torch.codegen.shared._Entry
    check: Any
    variants: tuple[Callable[..., Any], ...]
    fold_plan: Any  # ir2torch.codegen.fold_cache.FoldPlan, or None
    codegen: Any  # the first instance's calling convention
    folded: bool  # whether folding was asked for (part of what the instance is built with)


def template_key(impl: Implementation, fold: bool) -> Hashable | None:
    """The key under which instances of ``impl``'s body rebuild alike (``fold``: constant folding asked for), or
    ``None`` when ``impl`` is not an unexpanded instance of a shared body."""
    body = impl.shared_body
    if body is None or impl.name == "root":
        return None
    meta = impl.meta
    return (id(body), fold, impl.variant_count, tuple(repr(meta.get(k)) for k in _META_READ))


def record(codes: CodeCache, key: Hashable, impl: Implementation, gm: fx.GraphModule, graph: fx.Graph, check: Any,
           variants: list[Callable[..., Any]], fold: bool) -> None:
    """Remember ``gm`` (instance ``impl`` of a shared body, built in full from ``graph``) as the template of
    ``key``, unless its code is not in ``codes`` (deferred, or a graph fx writes metadata into)."""
    entry = codes.entry_of(graph)
    if entry is None or impl.shared_body is None:
        return
    fold_state = gm.__dict__.get(FOLD_ATTR)
    # a copy: ``gm``'s own graph is the user's to change, and later instances copy theirs from this one when read
    codes.templates[key] = Template(impl.shared_body, copy_graph(graph), entry, check, tuple(variants),
                                    None if fold_state is None else fold_state.plan, graph._codegen, fold)


def instantiate(gm: fx.GraphModule, impl: Implementation, template: Template, codes: CodeCache) -> fx.GraphModule:
    """``gm`` (instance ``impl``, its state made) running ``template``'s code, with its own copy of the template's
    graph, its own calling convention, and error reports naming ``impl``."""
    adopt_template(gm, template, _own_convention(template.codegen, impl, codes))
    codes.hits += 1
    report_errors(gm, impl.name, template.check, list(template.variants))
    if template.fold_plan is not None:
        install_fold(gm, template.fold_plan)
    return gm


def _own_convention(codegen: Any, impl: Implementation, codes: CodeCache) -> Any:
    """A calling convention for instance ``impl`` equal to the template's ``codegen``: a new object of the same parts
    (what :func:`~ir2torch.codegen.source.calling_convention` would make again from the same ``meta`` entries, without
    reading and checking the specs again); made from ``impl.meta`` for any other kind of convention."""
    if type(codegen) is SafePyTreeCodeGen:
        return SafePyTreeCodeGen(codegen.pytree_info, codegen.parameters)
    if type(codegen) is SafeCodeGen:
        return SafeCodeGen()
    return calling_convention(impl.meta, impl.name, codes) if "in_spec" in impl.meta else SafeCodeGen()


def adopt_template(gm: fx.GraphModule, template: Template, codegen: Any) -> None:
    """Make ``gm`` run ``template``'s code, its graph a copy of ``template``'s with calling convention ``codegen``,
    copied when first read (:func:`_lazy_graph`); what ``gm.graph = copy`` with the template's code would do
    (:func:`ir2torch.codegen.shared.adopt`) otherwise."""
    cls = type(gm)
    gm.__dict__.pop("_graph", None)  # the empty graph of :func:`ir2torch.codegen.shared.placeholder_module`
    cls._graph = _lazy_graph(template.graph, codegen)
    for name, method in _MATERIALIZING.items():
        setattr(cls, name, method)
    adopt(gm, None, template.entry, codegen)


class _LazyGraph(property):
    """The property :func:`_lazy_graph` makes; ``source`` is the template's graph (read without making a copy:
    :func:`ir2torch.run_safety.forward_budget.install_budgets` asks which graphs write in place)."""

    source: fx.Graph


def _lazy_graph(source: fx.Graph, codegen: Any) -> property:
    """The ``_graph`` of a module running a copy of ``source``: made when first read (fx and everything else read
    a module's graph through ``gm.graph`` / ``gm._graph``), then kept as any module's graph is."""

    def get(self: fx.GraphModule) -> fx.Graph:
        graph = self.__dict__.get("_graph")
        if graph is None:
            graph = copy_graph(source)
            graph._codegen = codegen
            graph.owning_module = self
            self.__dict__["_graph"] = graph
        return graph

    def set_graph(self: fx.GraphModule, graph: fx.Graph) -> None:
        self.__dict__["_graph"] = graph

    lazy = _LazyGraph(get, set_graph)
    lazy.source = source
    return lazy


def _materializing(name: str) -> Callable[..., Any]:
    """fx's ``name`` method (one that reads the module's ``__dict__`` as it is), after the graph copy is made."""
    method = getattr(fx.GraphModule, name)

    def run(self: fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        _ = self._graph
        return method(self, *args, **kwargs)

    run.__name__ = name
    run.__doc__ = method.__doc__
    return run


#: fx's methods that read ``self.__dict__["_graph"]`` directly (copies, pickles, packages).
_MATERIALIZING = {name: _materializing(name) for name in ("__deepcopy__", "__reduce__", "__reduce_package__")}


def copy_graph(graph: fx.Graph) -> fx.Graph:
    """A new graph of the same nodes as ``graph`` (each copied by ``Graph.node_copy``), without its calling
    convention (the caller sets one)."""
    copy = fx.Graph()
    copies: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        copies[node] = copy.node_copy(node, copies.__getitem__)
    return copy


__all__ = ["Template", "adopt_template", "copy_graph", "instantiate", "record", "template_key"]
