"""Module hooks: carried into the IR where the trace shows their ops, refused by name everywhere else.

Forward hooks and forward pre-hooks run inside ``Module.__call__``, so ``torch.export`` traces their ops
like the module's own, under the module's ``nn_module_stack`` entry:

- a hooked module that has a **graph** implementation keeps them in its graph (the rebuilt module's forward
  computes what the original's hooked call did);
- a hooked **handled leaf** (``nn.Linear``, ``nn.LayerNorm``, ...) is rebuilt as its own class, without
  hooks, so the ops of its hooks must not vanish into the leaf. During the export each of its hooks runs
  inside a call of a temporary module registered under the leaf (:data:`SCOPE_NAME`); afterwards every
  op under such a scope has the leaf's entry and the scope's entry removed from its ``nn_module_stack``,
  so the ops (and modules the hooks call, like eager QAT's ``activation_post_process``) land in the caller's
  graph around the leaf's call. That carries ``torch.ao.quantization``'s observer / fake-quantize hooks.

Refused, with the module path and the hook's ``__qualname__``: global module hooks (process-wide state, they
would apply to the rebuilt model a second time), backward hooks (dropped by the trace), the old
``torch.nn.utils.weight_norm`` pre-hook (it sets an attribute the leaf then reads), hooks on modules inside a
handled leaf (its rebuilt class has none), hooks on a whole-model leaf, on a leaf whose call signature must be
preserved (several inputs or outputs), and leaf hooks that hand the leaf anything but its one argument.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.ao.quantization import DeQuantStub, QuantStub
from torch.nn.modules import module as _module

from common.quant import CLASSES, PT2E_OBSERVERS, hook_to_data
from torch2ir.frontend.export import needs_signature
from torch2ir.hierarchy.modules import ModuleTable, enclosing_path

Problem = tuple[str, str, str]  # (implementation, message, hint)

#: Name of the temporary submodule a hooked leaf's hooks run in during the export.
SCOPE_NAME = "_torch2ir_hook_scope"

_FORWARD = ("_forward_pre_hooks", "_forward_hooks")
_BACKWARD = ("_backward_pre_hooks", "_backward_hooks")
_GLOBAL = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
           "_global_backward_hooks")


def hook_name(hook: Any) -> str:
    """The ``__qualname__`` of a hook (of its class for a callable object), with its module."""
    target = getattr(hook, "func", hook)  # functools.partial
    qual = getattr(target, "__qualname__", None) or type(target).__qualname__
    mod = getattr(target, "__module__", None) or type(target).__module__
    return f"{mod}.{qual}" if mod else qual


def _names(hooks: dict[int, Any]) -> str:
    return ", ".join(hook_name(h) for h in hooks.values())


def _forward_hooks(module: nn.Module) -> list[Any]:
    return [h for attr in _FORWARD for h in getattr(module, attr).values()]


def _is_weight_norm(hook: Any) -> bool:
    from torch.nn.utils.weight_norm import WeightNorm

    return isinstance(hook, WeightNorm)


def check_hooks(model: nn.Module, table: ModuleTable) -> tuple[list[Problem], list[str]]:
    """Every hook the IR cannot carry, and the paths of the handled leaves whose hooks it carries.

    Returns:
        ``(problems, hooked_leaves)``: one problem per refused hook (naming its module and ``__qualname__``)
        and the paths of the outermost handled leaves with forward (pre-)hooks to scope during the export.
    """
    problems: list[Problem] = []
    for attr in _GLOBAL:
        hooks = getattr(_module, attr, {})
        if hooks:
            problems.append(("root", f"global module hook(s) registered ({attr}): {_names(hooks)}",
                             "global hooks are process-wide and would apply to the rebuilt model too; remove "
                             "them before converting (register them on the rebuilt model again if wanted)"))
    hooked: list[str] = []
    leaves: set[str] = set()
    for path, module in model.named_modules():
        key = table.key(path) or "root"
        inside = enclosing_path(path, leaves) if path else None
        leaf = table.is_leaf(module)
        if leaf and inside is None:
            leaves.add(path)
        for attr in _BACKWARD:
            hooks = getattr(module, attr)
            if hooks:
                problems.append((key, f"backward hook(s) {_names(hooks)} on {type(module).__name__}",
                                 "the IR holds the forward computation only; remove the hook before converting "
                                 "and register it on the rebuilt model"))
        forward = _forward_hooks(module)
        if not forward:
            continue
        names = ", ".join(hook_name(h) for h in forward)
        weight_norm = [h for h in module._forward_pre_hooks.values() if _is_weight_norm(h)]
        if weight_norm:
            problems.append((key, f"old-style torch.nn.utils.weight_norm on {type(module).__name__} "
                             f"(forward pre-hook {hook_name(weight_norm[0])}) sets the weight the module reads",
                             "use torch.nn.utils.parametrizations.weight_norm, or torch.nn.utils.remove_weight_norm "
                             "before converting"))
        elif inside is not None:
            problems.append((key, f"forward hook(s) {names} on a module inside handled "
                             f"{type(table.module_of_key[table.key(inside) or 'root']).__name__} {inside!r}",
                             "the handled module is rebuilt as its own class without hooks; remove the hook, "
                             "or drop the handler of the enclosing class"))
        elif leaf and hook_to_data(module) is not None:
            continue  # torch.ao's observer hook: recorded in meta["observer_hook"] and registered on the rebuilt leaf
        elif leaf and path == "":
            problems.append((key, f"forward hook(s) {names} on the whole model, a handled "
                             f"{type(module).__name__}", "wrap the model in a module whose forward calls it"))
        elif leaf and needs_signature(module):
            problems.append((key, f"forward hook(s) {names} on handled {type(module).__name__}, whose call "
                             "signature (several inputs or outputs) cannot be kept with hooks",
                             "remove the hook before converting, or call the module from a wrapper that "
                             "does what the hook does"))
        elif leaf:
            hooked.append(path)
    return problems, hooked


class _Scope(nn.Module):
    """The module a hooked leaf's hooks are called in during the export (its ops get their own stack entry)."""

    def forward(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)


@contextlib.contextmanager
def hook_scopes(model: nn.Module, paths: list[str], table: ModuleTable | None = None) -> Iterator[None]:
    """While exporting: run every forward (pre-)hook of the leaves at ``paths`` inside a :class:`_Scope` call,
    and trace each handled leaf of :data:`STAND_IN_TYPES` (of ``table``) as one op that records its call.

    Each hook is replaced in place (same handle id, so its ``with_kwargs`` / ``always_call`` flags stay) by a
    wrapper, and the scope module is registered under the leaf as :data:`SCOPE_NAME`; all is put back after.
    """
    saved: list[tuple[dict[int, Any], int, Any]] = []
    added: list[nn.Module] = []
    stubs = [m for m in model.modules() if is_stand_in(m) and "forward" not in vars(m)
             and table is not None and table.is_leaf(m)]
    try:
        for stub in stubs:
            stub.forward = _marked_identity
        for path in paths:
            leaf = model.get_submodule(path)
            scope = _Scope()
            leaf._modules[SCOPE_NAME] = scope
            added.append(leaf)
            for attr in _FORWARD:
                hooks = getattr(leaf, attr)
                for handle_id, hook in list(hooks.items()):
                    saved.append((hooks, handle_id, hook))
                    hooks[handle_id] = _scoped(scope, hook)
        yield
    finally:
        for hooks, handle_id, hook in reversed(saved):
            hooks[handle_id] = hook
        for leaf in added:
            leaf._modules.pop(SCOPE_NAME, None)
        for stub in stubs:
            vars(stub).pop("forward", None)


#: Handled leaves traced as :func:`_marked_identity`: a ``QuantStub`` or ``DeQuantStub`` is an identity until
#: ``convert`` makes it a real (de)quantize, so its call must leave an op to be recorded by (a ``QuantStub`` of a
#: float model would otherwise vanish from the graph, and a rebuilt model prepared later would never quantize);
#: observers and fake-quantize modules branch on their buffers' values (``observer_enabled``, an unset
#: ``min_val``), which torch.export cannot trace. Their
#: calls are recorded either way and the rebuild runs the real classes, so what their stand-in computes is unused.
STAND_IN_TYPES: frozenset[type] = frozenset({QuantStub, DeQuantStub, *CLASSES.values()})


def is_stand_in(module: nn.Module) -> bool:
    """True for a module of :data:`STAND_IN_TYPES` or of :data:`common.quant.PT2E_OBSERVERS` (torchao's observers
    that branch on values, traced alike)."""
    cls = type(module)
    return cls in STAND_IN_TYPES or f"{cls.__module__}.{cls.__qualname__}" in PT2E_OBSERVERS


def _marked_identity(x: Any) -> Any:
    """The forward of :data:`STAND_IN_TYPES` during the export: the input, through one op (so the call is
    recorded)."""
    return torch.ops.aten.alias.default(x) if isinstance(x, torch.Tensor) else x


def _scoped(scope: _Scope, hook: Any) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        return scope(hook, *args, **kwargs)

    return run


def relocate_hook_ops(ep: torch.export.ExportedProgram) -> None:
    """Move the ops run by scoped hooks out of their leaf: drop the leaf's and the scope's stack entries."""
    suffix = "." + SCOPE_NAME
    for node in ep.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if not stack or not any(path.endswith(suffix) for path, _ in stack.values()):
            continue
        items = list(stack.items())
        keep: list[tuple[str, Any]] = []
        for key, (path, cls) in items:
            if path.endswith(suffix):
                leaf = path[: -len(suffix)]
                while keep and keep[-1][1][0] == leaf:
                    keep.pop()
                continue
            keep.append((key, (path, cls)))
        node.meta["nn_module_stack"] = dict(keep)


def check_hooked_frames(hierarchy: Any, paths: list[str]) -> list[Problem]:
    """A hooked leaf must get exactly its one argument: a hook that sets an attribute the leaf reads would
    otherwise feed it a value its rebuilt class never sees."""
    problems: list[Problem] = []
    table = hierarchy.table
    for path in paths:
        for frame in hierarchy.frames_by_path.get(path, []):
            values = [v for v in frame.inputs if not hierarchy.holds_state(frame, v)]
            if len(values) > 1 or len(frame.outputs) > 1:
                module = table.module_of_key[table.key(path)]
                names = ", ".join(hook_name(h) for h in _forward_hooks(module))
                problems.append((table.key(path), f"forward hook(s) {names} of {type(module).__name__} feed it "
                                 f"{len(values)} values (or take {len(frame.outputs)} of its results) where its "
                                 "call has one argument and one result", "remove the hook before converting"))
                break
    return problems
