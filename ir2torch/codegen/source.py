"""The one place where ir2torch turns a graph into Python source, and what guards it.

torch.fx writes a ``GraphModule``'s ``forward`` as Python source and executes it. Most of
that source is made of names fx creates itself, but a few strings are pasted in as they are:
placeholder and keyword-argument names, ``get_attr`` / ``call_module`` attribute paths, and
the forward-argument and keyword names of a pytree calling convention. Every graph ir2torch
builds (module graphs, higher-order-op bodies, executed FlatIRs) is installed through
:func:`install_graph`, which checks each of those strings against the identifier rules of
:mod:`common.names` *before* fx generates or executes anything, and turns any failure of code
generation into an :class:`~common.errors.IRError`. Loading already validates the same fields
with messages naming the field; this gate makes sure no future field or code path can put a
file string into executed source unchecked.

The call of a module running generated code (checks, per-call graphs, folds, error reports) is in
:mod:`ir2torch.codegen.module_call`.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import fx
from torch.fx.graph import CodeGen, _PyTreeCodeGen, _PyTreeInfo
from torch.utils import _pytree as pytree

from common.caches import output_unflatten
from common.errors import UnsafeNameError
from common.names import RESPELLED_NAMES, check_forward_arg_names, generated_global
from common.parameters import KINDS, NO_DEFAULT, Param, parse_parameters
from common.treespec import kwarg_names, load_spec
from ir2torch.codegen.arguments import ArgumentFlattener, _not_a_sequence
from ir2torch.codegen.constants import _respelled_constants, _spelled
from ir2torch.codegen.deferred_asserts import defer_asserts
from ir2torch.codegen.lazy import defer, generating
from ir2torch.codegen.lookups import _fast_lookups
from ir2torch.codegen.module_call import call_module
from ir2torch.codegen.module_call import child as module_child
from ir2torch.codegen.shared import CodeCache, placeholder_module
from ir2torch.run_safety.node_checks import checked_target

_COMPONENT = re.compile(r"[A-Za-z0-9_-]+\Z")  # common.names' rule: quoted where not an identifier
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _UniqueNames:
    """How both code generators name what generated code binds: every name comes from fx's namespace, once.

    The names generated code introduces are the ``def`` line's parameters (a file's forward-argument and parameter
    names, checked by :mod:`common.names`), the locals the graph's inputs are bound to, the locals of the other
    nodes and the globals (fx's and ir2torch's). fx takes the last two from its namespace, but writes an input's
    local as its placeholder's *target*, then copies it into the namespace's name (``input_2 = input_1``) when the
    two differ: with a list argument ``input`` unpacked into targets ``input_0, input_1, ...``, one input's copy
    overwrote the next one's target before it was read (torchvision's DenseNet concatenated one feature twice).
    Here the parameters are reserved first, exactly as spelled (no local or global takes one of them, builtins
    included: fx would otherwise name its global ``max`` ``max``), then each input takes its name from the
    namespace, and code is generated with the targets set to those names: the binding assigns each input once,
    to a name nothing else has, and no copy follows.
    """

    def _parameter_names(self) -> list[str]:
        return []

    @contextlib.contextmanager
    def _names_reserved(self, nodes: Any, namespace: Any) -> Iterator[None]:
        # exactly as spelled: ``create_name`` would reserve ``input_1`` for ``input`` (a builtin's name, which it
        # leaves free for the builtin itself)
        namespace._used_names.update(self._parameter_names())
        inputs = [node for node in nodes if node.op == "placeholder"]
        names = {node: namespace.create_name(node.target, node) for node in inputs}
        saved = {node: node.target for node in inputs}
        try:
            for node, name in names.items():
                node.target = name
            yield
        finally:
            for node, target in saved.items():
                node.target = target


class SafeCodeGen(_UniqueNames, CodeGen):
    """fx's plain calling convention (positional inputs: bodies of higher-order ops, graphs without a recorded
    ``in_spec``), with the names of :class:`_UniqueNames`. The inputs are reserved before any other name, so an
    input's parameter keeps the name the graph gives it (distinct identifiers, no builtin: :func:`check_graph`)."""

    def _gen_python_code(self, nodes: Any, root_module: str, namespace: Any, **kwargs: Any) -> Any:
        with self._names_reserved(nodes, namespace):
            # submodule calls through call_module as in SafePyTreeCodeGen (the data checks of a leaf are there)
            values = {generated_global("call_module"): call_module, generated_global("child"): module_child}
            names = {base: namespace.create_name(base, None) for base in values}
            code = super()._gen_python_code(nodes, root_module, namespace, **kwargs)
        code.src = _fast_lookups(code.src, nodes, root_module, lambda base: names.get(base, base))
        code.globals.update({names[base]: value for base, value in values.items()})
        return code


class SafePyTreeCodeGen(_UniqueNames, _PyTreeCodeGen):
    """fx's pytree calling convention, with the forward-argument names kept out of fx's namespace.

    fx names nodes and globals from a fresh namespace; the original argument names go into the
    ``def`` line unchanged. Reserving them first means no node or global can take one of those
    names and be shadowed by an argument inside the generated function (:class:`_UniqueNames`). An argument named
    like a global fx spells only in constants (``device``, ``inf``, ``nan``: :data:`common.names.RESPELLED_NAMES`)
    gets those constants written through ir2torch's own globals instead.
    """

    def __init__(self, pytree_info: _PyTreeInfo, parameters: list[Param] | None = None) -> None:
        super().__init__(pytree_info)
        self.parameters = list(parameters or [])

    def _parameter_names(self) -> list[str]:
        return list(dict.fromkeys([*self.pytree_info.orig_args, *(p.name for p in self.parameters)]))

    def _name(self, base: str) -> str:
        """The name generated code uses for the global ``base`` (a name ir2torch makes), as reserved by
        :meth:`_gen_python_code`: ``base`` itself unless a forward argument already has it (then fx's next free
        variant, so that no argument shadows it)."""
        return getattr(self, "_names", {}).get(base, base)

    def _gen_python_code(self, nodes: Any, root_module: str, namespace: Any, **kwargs: Any) -> Any:
        with self._names_reserved(nodes, namespace):
            shadowed = RESPELLED_NAMES.intersection(self._parameter_names())
            constants = _respelled_constants(nodes, shadowed) if shadowed else []
            outputs = self._output_nodes()
            values: dict[str, Any] = {generated_global("default", i): p.default
                                      for i, p in enumerate(self.parameters) if p.default is not NO_DEFAULT}
            values.update({generated_global("sequences"): (tuple, list, torch.Size),
                           generated_global("not_a_sequence"): _not_a_sequence,
                           generated_global("call_module"): call_module, generated_global("child"): module_child})
            for i, spec in enumerate(outputs):
                values.update({generated_global("out_fn", i): output_unflatten(spec.type),
                               generated_global("out_ctx", i): spec.context})
            values.update({generated_global("constant", i): value for i, value in enumerate(constants)})
            values[generated_global("flatten")] = ArgumentFlattener(tuple(self.pytree_info.orig_args))
            self._names = {base: namespace.create_name(base, None) for base in values}
            with _spelled(nodes, constants, [self._name(generated_global("constant", i))
                                             for i in range(len(constants))]):
                code = super()._gen_python_code(nodes, root_module, namespace, **kwargs)
        code.src = _fast_lookups(code.src, nodes, root_module, self._name)
        code.globals.update({self._name(base): value for base, value in values.items()})
        return code

    def gen_fn_def(self, free_vars: list[str], maybe_return_annotation: str, *, expanded_def: bool = False) -> str:
        """The ``def`` line: the recorded parameters with their kinds and defaults, when there are some."""
        if not self.parameters:
            return super().gen_fn_def(free_vars, maybe_return_annotation, expanded_def=expanded_def)
        parts = ["self"]
        for i, param in enumerate(self.parameters):
            if param.kind is KINDS["keyword_only"] and "*" not in parts:
                parts.append("*")
            default = self._name(generated_global("default", i))
            parts.append(param.name if param.default is NO_DEFAULT else f"{param.name}={default}")
            following = self.parameters[i + 1].kind if i + 1 < len(self.parameters) else None
            if param.kind is KINDS["positional_only"] and following is not KINDS["positional_only"]:
                parts.append("/")
        line = f"def {self._func_name}({', '.join(parts)}){maybe_return_annotation}:"
        if free_vars:
            line += self.gen_var_bindings(self.pytree_info.orig_args, free_vars, expanded_def)
        return line

    def _argument_parts(self) -> list[str] | None:
        """How each argument binds to the graph's inputs without a pytree call: ``name`` for a leaf, ``*name`` for
        a tuple or list of leaves (unpacked: its length must match); ``None`` when any argument is nested deeper."""
        spec = self.pytree_info.in_spec
        if spec.type is tuple and spec.num_children == 2 and spec.child(1).type is dict:
            tops = [*spec.child(0).children(), *spec.child(1).children()]
        else:
            tops = spec.children()
        if len(tops) != len(self.pytree_info.orig_args):
            return None
        parts = []
        for name, child in zip(self.pytree_info.orig_args, tops):
            if child.is_leaf():
                parts.append(name)
            elif child.type in (tuple, list) and child.num_children and all(c.is_leaf() for c in child.children()):
                parts.append(f"*({name} if type({name}) in {self._name(generated_global('sequences'))} else "
                             f"{self._name(generated_global('not_a_sequence'))}({name!r}, {name}))")
            else:
                return None
        return parts

    def gen_var_bindings(self, fn_args: list[str], free_vars: list[str], expanded_def: bool) -> str:
        """Bind the graph's inputs to the arguments; a plain tuple assignment when every argument is a leaf or a
        tuple/list of leaves (no pytree call on every forward)."""
        parts = self._argument_parts()
        if parts is None or len(free_vars) != self.pytree_info.in_spec.num_leaves:
            # fx's binding, through the structure check of :class:`ArgumentFlattener` (fx's own flattening cuts a
            # longer list to the traced length, and its error prints the arguments' values)
            text = super().gen_var_bindings(fn_args, free_vars, expanded_def)
            return text.replace("= fx_pytree.tree_flatten_spec(", f"= {self._name(generated_global('flatten'))}(", 1)
        bindings = self._format_annotations(free_vars, expanded_def)
        names = [x.split(":")[0].split("#")[0] for x in free_vars]
        return bindings + f"""
    {", ".join(names)}, = {", ".join(parts)},"""

    def generate_output(self, output_args: Any, *, descs: Any = None, repr_fn: Any = None) -> str:
        """Return the original result structure, built by the generated expression itself: tuples and lists as
        literals, every other node (a dict, ``ModelOutput``, named tuple...) by its registered unflatten function
        (what ``tree_unflatten`` ends up calling, without its per-call recursion over the spec)."""
        spec = self.pytree_info.out_spec if self.pytree_info is not None else None
        if spec is not None and isinstance(output_args, (list, tuple)) and descs is None \
                and spec.num_leaves == len(output_args):
            return f"return {self._build(spec, iter(output_args), itertools.count(), repr_fn or repr)}"
        return super().generate_output(output_args, descs=descs, repr_fn=repr_fn)

    def _output_nodes(self) -> list[pytree.TreeSpec]:
        """The output spec's nodes built by their unflatten function (neither leaves, tuples nor lists), in the
        order :meth:`_build` numbers them."""
        spec = self.pytree_info.out_spec if self.pytree_info is not None else None
        found: list[pytree.TreeSpec] = []

        def walk(node: pytree.TreeSpec) -> None:
            if node.is_leaf():
                return
            if node.type not in (tuple, list):
                found.append(node)
            for child in node.children():
                walk(child)

        if spec is not None:
            walk(spec)
        return found

    def _build(self, spec: pytree.TreeSpec, leaves: Any, calls: Any, show: Callable[[Any], str]) -> str:
        if spec.is_leaf():
            return show(next(leaves))
        if spec.type not in (tuple, list):
            index = next(calls)  # pre-order, as :meth:`_output_nodes` walks
            items = "".join(self._build(c, leaves, calls, show) + ", " for c in spec.children())
            return (f"{self._name(generated_global('out_fn', index))}([{items}], "
                    f"{self._name(generated_global('out_ctx', index))})")
        items = "".join(self._build(c, leaves, calls, show) + ", " for c in spec.children())
        return f"({items})" if spec.type is tuple else f"[{items}]"


def calling_convention(meta: dict[str, Any], implementation: str, codes: CodeCache | None = None) -> SafePyTreeCodeGen:
    r"""The codegen that makes a rebuilt module take the original ``(*args, **kwargs)`` and return
    the original output structure (tuples, dicts, ``ModelOutput``\ s), from ``in_spec``,
    ``out_spec``, ``forward_arg_names`` and (for a submodule) ``parameters`` of ``meta``. With ``codes``
    (one per conversion), each spec text is read once (:meth:`CodeCache.spec`).

    Raises:
        IRFormatError: a spec is unreadable or names an output type no imported library registered.
        UnsafeNameError: an argument or keyword name is not a plain identifier.
    """
    read = codes.spec if codes is not None else load_spec
    in_spec = read(meta["in_spec"], "in_spec", implementation=implementation)
    out_spec = read(meta["out_spec"], "out_spec", implementation=implementation) if meta.get("out_spec") else None
    kwarg_names(in_spec, implementation=implementation)
    names = check_forward_arg_names(meta.get("forward_arg_names", []), implementation=implementation)
    if not names:
        names = [f"arg_{i}" for i in range(in_spec.num_leaves)]
    params = parse_parameters(meta["parameters"], names, implementation=implementation) \
        if "parameters" in meta else None
    return SafePyTreeCodeGen(_PyTreeInfo(names, in_spec, out_spec), params)


def _check_text(value: Any, pattern: re.Pattern[str], what: str, implementation: str, node: str) -> None:
    parts = value.split(".") if isinstance(value, str) and pattern is _COMPONENT else [value]
    if not all(isinstance(p, str) and pattern.match(p) for p in parts):
        raise UnsafeNameError(f"{what} {str(value)[:80]!r} cannot appear in generated code",
                              implementation=implementation, node=node,
                              hint="names used as code must be plain identifiers / dotted attribute paths")


def check_graph(graph: fx.Graph, implementation: str) -> None:
    """Every string fx will paste into source: identifiers and dotted attribute paths only.

    Raises:
        UnsafeNameError: naming the implementation and fx node.
    """
    placeholders: set[str] = set()
    for node in graph.nodes:
        where = node.meta.get("ir_node", node.name)
        if node.op == "placeholder":
            _check_text(node.target, _IDENTIFIER, "placeholder", implementation, where)
            if node.target in placeholders:
                raise UnsafeNameError(f"two inputs are both named {node.target!r}", implementation=implementation,
                                      node=where)
            placeholders.add(node.target)
        elif node.op in ("get_attr", "call_module"):
            _check_text(node.target, _COMPONENT, "attribute path", implementation, where)
        for key in node.kwargs:
            _check_text(key, _IDENTIFIER, "keyword argument", implementation, where)
    codegen = graph._codegen
    if type(codegen) not in (CodeGen, SafeCodeGen, SafePyTreeCodeGen):
        raise UnsafeNameError(f"code generator {type(codegen).__name__} is not one of ir2torch's",
                              implementation=implementation)
    if isinstance(codegen, _PyTreeCodeGen):
        if not isinstance(codegen, SafePyTreeCodeGen):
            raise UnsafeNameError("a pytree calling convention must come from calling_convention()",
                                  implementation=implementation)
        check_forward_arg_names(list(codegen.pytree_info.orig_args), implementation=implementation)
        kwarg_names(codegen.pytree_info.in_spec, implementation=implementation)


def checked_calls(graph: fx.Graph) -> None:
    """Make each ``call_function`` node whose operator has a precondition on data call it checked
    (:func:`~ir2torch.run_safety.node_checks.checked_target`; nearly every node is left as it is), and its runtime
    assertions checked at the end while exported (:mod:`ir2torch.codegen.deferred_asserts`)."""
    defer_asserts(graph)
    for node in graph.nodes:
        if node.op == "call_function":
            target = checked_target(node.target, node)
            if target is not node.target:
                node.target = target


def install_graph(gm: fx.GraphModule, graph: fx.Graph, implementation: str,
                  codes: CodeCache | None = None) -> fx.GraphModule:
    """Check ``graph`` (:func:`check_graph`) and make it ``gm``'s graph (fx generates and runs its source; with
    ``codes``, only once per distinct graph of a conversion: :mod:`ir2torch.codegen.shared`).

    Raises:
        UnsafeNameError: a string that would reach generated source is not a plain name.
        IRFormatError: fx cannot generate or compile the source (names the implementation).
    """
    if type(graph._codegen) is CodeGen:
        graph._codegen = SafeCodeGen()
    checked_calls(graph)
    check_graph(graph, implementation)

    def compile_one() -> None:
        gm.graph = graph  # the setter generates the source and executes the ``def``

    with generating(implementation):
        if codes is None:
            compile_one()
        else:
            codes.install(gm, graph, compile_one, lambda: defer(gm, graph, implementation))
    return gm


def compile_variant(graph: fx.Graph, implementation: str, codes: CodeCache | None = None) -> Callable[..., Any]:
    """The generated ``forward(self, ...)`` of a per-call graph, through the same checks as every graph (with
    ``codes``: generated once per distinct graph of a conversion)."""
    def compile_one() -> Callable[..., Any]:
        holder = install_graph(placeholder_module("Variant"), graph, implementation)
        return type(holder).forward

    if codes is None:
        return compile_one()
    checked_calls(graph)
    check_graph(graph, implementation)
    return codes.function(graph, compile_one)


__all__ = ["ArgumentFlattener", "SafeCodeGen", "SafePyTreeCodeGen", "calling_convention", "check_graph",
           "compile_variant", "install_graph"]
