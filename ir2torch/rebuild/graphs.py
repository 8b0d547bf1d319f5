"""Turn implementation graphs into ``torch.fx.GraphModule``s and assemble the module tree.

One fx node per IR node, in the IR's node order (a topological order that keeps the
stored order wherever the edges allow):

==============  ==================================================================
IR node type    fx node
==============  ==================================================================
``input``       ``placeholder``
``function``    ``call_function`` of the target resolved through the allow-list
``get_attr``    ``get_attr`` of one of the implementation's own state entries
``output``      ``output``
anything else   ``call_module`` of the called implementation (a child module)
==============  ==================================================================
"""

from __future__ import annotations

import builtins
import collections
import functools
import keyword
import operator
from typing import Any

import torch
from torch import fx, nn
from torch.fx.immutable_collections import immutable_dict

from common.errors import ArgumentMismatchError, IRValidationError
from common.functional_modules import method_of
from common.ir import CARRIED_NOTES, NOTES_KEY, ORIGINAL_CLASS_KEY, Implementation, slot_path
from common.names import CODEGEN_NAMES, sanitize, without_counter
from common.order import execution_order
from common.safety import Allowlist
from common.values import TRAINING, Ref, Subgraph
from ir2torch.codegen.constant_fold import attach_fold
from ir2torch.codegen.direct_op import direct_op
from ir2torch.codegen.module_call import report_errors, select_variant
from ir2torch.codegen.shared import CodeCache, placeholder_module
from ir2torch.codegen.source import calling_convention, compile_variant, install_graph
from ir2torch.guards.same_inputs import insert_same_inputs
from ir2torch.guards.signature_check import SignatureCheck
from ir2torch.rebuild.constants import keep_constants
from ir2torch.rebuild.instances import instantiate, record, template_key
from ir2torch.rebuild.paths import owner_of

#: Ops that only check what the trace saw (a value's dtype, device, layout) and return nothing. Export puts one
#: at every ``.to(...)``; eager PyTorch never runs them, so a rebuilt graph leaves them out when nothing uses them.
CHECK_ONLY_OPS = frozenset({"aten._assert_tensor_metadata.default"})


def run_with_grad_enabled(enabled: bool, body: Any, *args: Any) -> Any:
    """``wrap_with_set_grad_enabled(enabled, body, *args)`` run directly: the higher-order op's own dispatch
    costs more than its body in a small model (Llama's rotary embedding). ``no_grad``/``enable_grad`` switch
    the mode once (``set_grad_enabled`` switches it on construction and again on entry, which export would
    record as an extra, empty region when the rebuilt model is converted again)."""
    with torch.enable_grad() if enabled else torch.no_grad():
        return body(*args)


def _call_target(impl: Implementation, node: str, attrs: dict[str, Any]) -> str:
    explicit = attrs.get("target")
    if isinstance(explicit, str):
        return explicit
    callee = attrs["implementation"]
    if impl.name == "root":
        return callee
    if callee.startswith(impl.name + "."):
        return callee[len(impl.name) + 1 :]
    raise IRValidationError(
        f"node calls {callee!r}, which is not below {impl.name!r}",
        implementation=impl.name,
        node=node,
        hint="give the node a 'target' attribute path, or call a descendant implementation",
    )


def runtime_device(value: Any) -> torch.device:
    """The device a traced ``meta`` device argument stands for at run time: that of ``value`` (one of the
    module's own tensors, or its first input), so a graph traced on ``meta`` runs wherever its weights are."""
    return value.device if isinstance(value, torch.Tensor) else torch.device("cpu")


class GraphBuilder:
    """Builds one fx graph from one implementation's IR graph."""

    def __init__(self, impl: Implementation, allowlist: Allowlist, codes: CodeCache | None = None) -> None:
        self.impl = impl
        self.allowlist = allowlist
        self.codes = codes
        self.graph = fx.Graph()
        self.env: dict[str, fx.Node] = {}
        self._items: dict[tuple[str, int], fx.Node] = {}
        self._training: fx.Node | None = None
        self._device: fx.Node | None = None
        self._first_input: fx.Node | None = None
        self._placeholders: set[str] = set()

    def placeholder_name(self, node: str) -> str:
        """A distinct identifier for input ``node`` (sanitized names of two inputs may coincide)."""
        name = base = fx_name(node)
        suffix = 1
        while name in self._placeholders:
            name = f"{base}_{suffix}"
            suffix += 1
        self._placeholders.add(name)
        return name

    def value(self, src: str, index: int | None) -> fx.Node:
        base = self.env[src]
        if index is None:
            return base
        key = (src, index)
        if key not in self._items:
            self._items[key] = self.graph.call_function(operator.getitem, (base, index))
        return self._items[key]

    def substitute(self, value: Any) -> Any:
        if isinstance(value, Ref):
            return self.value(value.node, value.index)
        if value is TRAINING:
            if self._training is None:
                self._training = self.graph.get_attr("training")
            return self._training
        if isinstance(value, torch.device) and value.type == "meta":
            return self.device()
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, torch.Size):  # generated code would spell it as a plain tuple
            return self.graph.call_function(torch.Size, (list(value),))
        if isinstance(value, tuple):
            return tuple(self.substitute(v) for v in value)
        if isinstance(value, dict):
            items = {k: self.substitute(v) for k, v in value.items()}
            if type(value) is collections.OrderedDict:  # fx keeps a node's dicts as plain dicts: built in the code
                return self.graph.call_function(collections.OrderedDict, (list(items.items()),))
            if type(value) not in (dict, immutable_dict):
                raise IRValidationError(f"an argument is a dict of type {type(value).__qualname__}, which the rebuilt "
                                        "code cannot pass as it is", implementation=self.impl.name,
                                        hint="IR values hold plain dicts and OrderedDicts only")
            return items
        return value

    def arguments(self, node: str, attrs: dict[str, Any]) -> tuple[tuple, dict]:
        if "args" in attrs or "kwargs" in attrs:
            return tuple(self.substitute(list(attrs.get("args", [])))), self.substitute(dict(attrs.get("kwargs", {})))
        positional: dict[int, fx.Node] = {}
        kwargs: dict[str, fx.Node] = {}
        free: list[fx.Node] = []
        for src, _, data in self.impl.in_edges(node):
            value = self.value(src, data.get("src_index"))
            slot = data.get("slot")
            if slot is None:
                free.append(value)
                continue
            head = slot_path(slot)[0]
            if isinstance(head, int):
                positional[head] = value
            else:
                kwargs[head] = value
        args = []
        for i in range(len(positional) + len(free)):
            if i in positional:
                args.append(positional[i])
            elif free:
                args.append(free.pop(0))
            else:
                raise ArgumentMismatchError(f"no edge fills argument {i}", implementation=self.impl.name, node=node)
        return tuple(args), kwargs

    def bind_subgraphs(self, fn: Any, args: tuple) -> tuple[Any, tuple]:
        """A higher-order op's body becomes a ``GraphModule`` bound into the call target."""
        bodies = {
            i: install_graph(placeholder_module("Subgraph"),
                             GraphBuilder(a.impl, self.allowlist, self.codes).build(), self.impl.name, self.codes)
            for i, a in enumerate(args) if isinstance(a, Subgraph)
        }
        if fn is torch.ops.higher_order.wrap_with_set_grad_enabled:
            fn = run_with_grad_enabled
        return SubgraphCall(fn, bodies), tuple(a for a in args if not isinstance(a, Subgraph))

    def device(self) -> fx.Node | torch.device:
        """A node computing the run-time device, for device arguments recorded on ``meta`` (a weight-free trace)."""
        if self._device is None:
            owned = [name for name, rec in self.impl.state.items() if "." not in name]
            anchor = self.graph.get_attr(owned[0]) if owned else self._first_input
            if anchor is None:
                return torch.device("cpu")
            self._device = self.graph.call_function(runtime_device, (anchor,))
        return self._device

    def function(self, node: str, target: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        """What a ``function`` node calling ``target`` with ``args`` and ``kwargs`` calls: the allow-list's callable
        (:meth:`~common.safety.Allowlist.resolve`, which refuses what it does not allow) as :func:`direct_op` makes
        it; ``None`` when an argument is a higher-order op's body. Remembered per conversion (``codes``) by target,
        keyword names and positional count: what the result depends on."""
        if any(isinstance(a, Subgraph) for a in args):
            return None
        memo = self.codes.functions if self.codes is not None and type(target) is str else None
        key = (id(self.allowlist), target, tuple(kwargs), len(args))
        fn = memo.get(key) if memo is not None else None
        if fn is None:
            fn = direct_op(self.allowlist.resolve(target, implementation=self.impl.name, node=node), kwargs, len(args))
            if memo is not None:
                memo[key] = fn
        return fn

    def build(self) -> fx.Graph:
        outputs_seen = False
        for node in execution_order(self.impl):
            attrs = self.impl.graph._node[node]  # ``impl.node(node)``, without networkx's views
            kind = attrs["type"]
            if kind == "input":
                self.env[node] = self.graph.placeholder(self.placeholder_name(node))
                self.env[node].meta["ir_node"] = node
                self._first_input = self._first_input or self.env[node]
                continue
            unused = not self.impl.graph._succ[node]  # no out-edge
            if kind == "function" and attrs["implementation"] in CHECK_ONLY_OPS and unused:
                continue
            args, kwargs = self.arguments(node, attrs)
            if kind == "output":
                if "args" in attrs:
                    result = args[0] if args else None
                else:
                    result = args[0] if len(args) == 1 else tuple(args) if args else None
                self.graph.output(result)
                outputs_seen = True
                continue
            name = fx_name(local_name(node))
            if kind == "function":
                fn = self.function(node, attrs["implementation"], args, kwargs)
                if fn is None:  # a higher-order op: its bodies are bound into the call
                    fn = self.allowlist.resolve(attrs["implementation"], implementation=self.impl.name, node=node)
                    fn, args = self.bind_subgraphs(fn, args)
                fx_node = self.graph.create_node("call_function", fn, args, kwargs, name=name)
            elif kind == "get_attr":
                fx_node = self.graph.create_node("get_attr", attrs["implementation"], name=name)
            else:
                target = _call_target(self.impl, node, attrs)
                if attrs.get("variant"):  # this call runs one of the callee's per-call graphs
                    self.graph.call_function(select_variant, (self.graph.get_attr(target), attrs["variant"]))
                method = method_of(attrs, kind, self.impl.name, node)  # FloatFunctional.add(...): a function
                if method is not None:
                    fx_node = self.graph.create_node("call_function", method, (self.graph.get_attr(target), *args),
                                                     kwargs, name=name)
                else:
                    fx_node = self.graph.create_node("call_module", target, args, kwargs, name=name)
            fx_node.meta["ir_node"] = node
            fx_node.meta["op_type"] = attrs.get("implementation") if kind in ("function", "get_attr") else kind
            self.env[node] = fx_node
        if not outputs_seen:
            self.graph.output(None)
        return self.graph


class SubgraphCall:
    """Calls ``fn`` with graph modules inserted at fixed argument positions.

    Used for higher-order ops (``wrap_with_set_grad_enabled(False, body, *args)``): the
    body is not a submodule of the rebuilt model, so ``named_modules()`` stays the original's.
    """

    def __init__(self, fn: Any, bodies: dict[int, nn.Module]) -> None:
        self.fn = fn
        self.bodies = bodies
        self.__name__ = f"{getattr(fn, '__name__', 'call')}_with_body".replace(".", "_")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        full = list(args)
        for position in sorted(self.bodies):
            full.insert(position, self.bodies[position])
        return self.fn(*full, **kwargs)


def local_name(node: str) -> str:
    """The name of IR node ``node`` without the numeric suffix of export's counters (``add_14`` -> ``add``).

    Export numbers its nodes across the whole model, so the same node of two identical layers has two names;
    without the counter, fx numbers them again within each graph (``add``, ``add_1``...), which makes the
    generated code of identical layers identical (and shareable, :mod:`ir2torch.codegen.shared`). The IR's own
    name stays on the fx node (``meta["ir_node"]``) and in error messages.
    """
    return without_counter(node)


def fx_name(name: str) -> str:
    """A Python identifier for generated code: no keyword, builtin or ``self``."""
    cleaned = sanitize(name)
    if cleaned in _RESERVED_NAMES or keyword.iskeyword(cleaned):
        cleaned += "_"
    return cleaned


_RESERVED_NAMES = CODEGEN_NAMES | frozenset(dir(builtins))


def graph_module(
    impl: Implementation, allowlist: Allowlist, *, device: torch.device | str | None = None, guard: Any = None,
    codes: CodeCache | None = None, fold: bool = True,
) -> fx.GraphModule:
    """An empty-bodied ``GraphModule`` for ``impl`` running its graph.

    Its own parameters and buffers are created from ``impl.state`` (uninitialised, of the
    recorded shape and dtype, on ``device``); children are attached later by the caller. A
    ``guard`` (:class:`~ir2torch.guards.check.InputGuard`) is called with the placeholders first.
    ``codes`` (one per conversion) shares generated code between identical graphs
    (:mod:`ir2torch.codegen.shared`), and builds later instances of a shared body from the first
    (:mod:`ir2torch.rebuild.instances`). With ``fold``, input-independent values are computed once per module
    (:mod:`ir2torch.codegen.constant_fold`).
    """
    key = template_key(impl, fold) if codes is not None and guard is None else None
    template = codes.templates.get(key) if key is not None else None  # type: ignore[union-attr]
    if template is not None and template.body is not impl.shared_body:
        template = None
    # its graph is installed below (an instance of a template gets its own copy of the template's, when read)
    gm = placeholder_module(_class_name(impl), graph=template is None)
    if isinstance(impl.meta.get("class"), str):
        gm.meta[ORIGINAL_CLASS_KEY] = impl.meta["class"]
    # the root's notes on the original's train mode, or a child traced on its own's (checked on load: only those)
    notes = {k: impl.meta[k] for k in CARRIED_NOTES if k in impl.meta}
    if notes:
        gm.meta[NOTES_KEY] = notes
    for name, rec in impl.state.items():
        shape = [int(s) if isinstance(s, int) else 1 for s in rec["shape"]]
        tensor = torch.empty(shape, dtype=rec["dtype"], device=device)
        if rec["kind"] == "parameter":
            value: torch.Tensor = nn.Parameter(tensor, requires_grad=bool(rec.get("requires_grad", True)))
            _set_state(gm, name, value, "parameter", bool(rec.get("persistent", True)))
        else:
            _set_state(gm, name, tensor, rec["kind"], bool(rec.get("persistent", True)))
    lifted = tuple(n for n, rec in impl.state.items() if rec["kind"] == "constant")
    if template is not None:
        return keep_constants(instantiate(gm, impl, template, codes), lifted)  # type: ignore[arg-type]
    # an unexpanded instance of a shared body is built from its body, whose calls name children by paths relative
    # to the module (the same from the body's home as from the instance)
    source = impl.shared_body or impl
    graph = GraphBuilder(source, allowlist, codes).build()
    insert_same_inputs(graph, source)
    if guard is not None:
        guard.insert(graph)
    if "in_spec" in impl.meta:
        graph._codegen = calling_convention(impl.meta, impl.name, codes)
    # generates the source once, with the codegen in place; failures while running name this implementation
    check = guard.check_call if guard is not None and guard.arg_names else None
    if check is None and "parameters" in impl.meta:
        codegen = graph._codegen
        inputs = [source.node(n).get("meta") for n in source.nodes if source.node(n)["type"] == "input"]
        # per-call graphs differ in their constants: the parent's choice of graph stands for the check
        constants = [] if impl.variant_count else \
            [(i, m) for i, m in enumerate(inputs) if m is None or type(m) in (bool, int, float, str)]
        check = SignatureCheck(codegen.parameters, codegen.pytree_info.in_spec,  # type: ignore[attr-defined]
                               constants)
    variants = []
    for variant in source.variants:  # per-call graphs share the module's calling convention
        vgraph = GraphBuilder(variant, allowlist, codes).build()
        insert_same_inputs(vgraph, variant)
        if "in_spec" in impl.meta:
            vgraph._codegen = calling_convention(impl.meta, impl.name, codes)
        variants.append(compile_variant(vgraph, impl.name, codes))
    gm = report_errors(install_graph(gm, graph, impl.name, codes), impl.name, check, variants)
    if fold:
        attach_fold(gm, graph, impl.name, codes,
                    (lambda: calling_convention(impl.meta, impl.name, codes)) if "in_spec" in impl.meta else None,
                    frozenset(lifted))
    if key is not None:
        record(codes, key, impl, gm, graph, check, variants, fold)  # type: ignore[arg-type]
    return keep_constants(gm, lifted)


def _set_state(root: nn.Module, path: str, tensor: torch.Tensor, kind: str, persistent: bool) -> None:
    module, last = owner_of(root, path)
    if kind == "parameter":
        module.register_parameter(last, tensor)  # type: ignore[arg-type]
        if not persistent:  # its original module leaves it out of its state dict (brevitas' uncollected scale)
            module._register_state_dict_hook(functools.partial(_drop_entry, last))
    elif kind == "buffer":
        module.register_buffer(last, tensor, persistent=persistent)
    else:  # lifted constant: a plain tensor attribute, not part of the state dict
        setattr(module, last, tensor)


def _drop_entry(name: str, module: nn.Module, state: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """State-dict hook: leave the parameter ``name`` out, as the module it was converted from did."""
    state.pop(prefix + name, None)


def _class_name(impl: Implementation) -> str:
    cls = impl.meta.get("class")
    base = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else impl.type.title()
    return fx_name(base) or "IRModule"
