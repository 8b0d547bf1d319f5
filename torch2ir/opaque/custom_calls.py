"""Which modules call custom ``torch.autograd.Function``\\ s, so that they can be kept as opaque leaves.

``torch.export`` records a custom Function's forward ops, never its own ``backward``: a straight-through
estimator (brevitas' ``round_ste``) traced into a graph gets ``round``'s zero gradient. A module kept as an opaque
leaf is rebuilt as its real class running its real forward, the Function's backward included, so a rebuild trains
as the original does. :func:`callers` finds, from the calls an export noted
(:mod:`torch2ir.frontend.custom_backward`), the modules to keep so: the module whose own code runs the Function
(the innermost frame whose ``self`` is one of the model's modules), or the brevitas layer around it (a quantizer's
``RoundSte`` belongs to its layer, which its constructor makes again: :mod:`torch2ir.opaque.constructed`), or,
when that module is already opaque (its method other than ``forward`` was called), its nearest caller that is not.
A Function run by a handled leaf (rebuilt as its own class) needs nothing.

``opaque="auto"`` keeps them opaque (:mod:`torch2ir.opaque.driver`); otherwise :func:`warn` names their classes and
the ``opaque=`` that would.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from torch import nn

from common.errors import ConversionError
from common.notes import CustomBackwardWarning, custom_backward_message
from torch2ir.frontend.custom_backward import Call, names
from torch2ir.hierarchy.modules import CONTAINER_TYPES
from torch2ir.opaque.attribution import find_module, module_index, qualified_name
from torch2ir.opaque.constructed import holds_injectors, owns_subtree


@dataclass
class Caller:
    """A module to keep opaque for its custom Functions: its path (``""``: the root), the module and the Functions'
    classes (in first-call order)."""

    path: str
    module: nn.Module
    functions: list[type] = field(default_factory=list)

    def why(self) -> str:
        """The reason ``ir.capture.opaque`` records."""
        return (f"it calls custom autograd.Function(s) {', '.join(names(self.functions))}, whose own backward "
                "torch.export does not record")


def callers(model: nn.Module, calls: Sequence[Call], has_handler: Callable[[nn.Module], bool],
            opaque: Collection[type] = ()) -> tuple[dict[str, Caller], list[type]]:
    """The modules of ``model`` to keep opaque so that the Functions of ``calls`` run as their own, by path, and the
    Functions called from no module of ``model`` (none in practice: the root's forward is on the stack).

    ``opaque``: classes already opaque (a call from one of them is charged to its nearest caller that is not).
    """
    index = module_index(model)
    found: dict[str, Caller] = {}
    unplaced: list[type] = []
    placed: dict[str, tuple[str, nn.Module] | None] = {}
    for call in calls:
        hit = next((h for h in map(lambda owner: find_module(index, owner), call.owners) if h is not None), None)
        if hit is None:
            if call.function not in unplaced:
                unplaced.append(call.function)
            continue
        if hit[0] not in placed:  # each module once (finding a brevitas layer constructs it again)
            placed[hit[0]] = _placed(model, *hit, has_handler, opaque)
        if placed[hit[0]] is None:
            continue
        path, module = placed[hit[0]]
        caller = found.setdefault(path, Caller(path, module))
        if call.function not in caller.functions:
            caller.functions.append(call.function)
    return found, unplaced


def _placed(model: nn.Module, path: str, module: nn.Module, has_handler: Callable[[nn.Module], bool],
            opaque: Collection[type]) -> tuple[str, nn.Module] | None:
    """The module to keep opaque for a Function called by ``module``'s own code (see :func:`callers`), ``None``
    when nothing needs to be."""
    if _in_handled_leaf(model, path, has_handler):
        return None  # rebuilt as its own class: the Function runs as the original's
    if path:
        module, path = owning_layer(model, module, path)
    while type(module) in opaque and path:
        module, path = caller_path(model, path)
    return None if type(module) in opaque else (path, module)


def _in_handled_leaf(model: nn.Module, path: str, has_handler: Callable[[nn.Module], bool]) -> bool:
    parts = path.split(".") if path else []
    return any(has_handler(model.get_submodule(".".join(parts[:cut]))) for cut in range(1, len(parts) + 1))


def advice(classes: Sequence[str]) -> str:
    """What to pass to train a rebuild exactly, for modules of ``classes`` (qualified names) calling the
    Functions."""
    listed = ", ".join(repr(c) for c in classes)
    return (f"to train the rebuild exactly, keep the modules calling them ({listed}) as opaque leaves, rebuilt as "
            f"their real classes with their own backward: torch2ir.convert(model, args, opaque=\"auto\") or "
            f"opaque=[{listed}], then ir2torch.convert(ir, state, allow=common.opaque.named_classes(ir.values())) "
            "(docs/opaque.md)")


def warn(model: nn.Module, calls: Sequence[Call], has_handler: Callable[[nn.Module], bool],
         opaque: Collection[type] = ()) -> None:
    """Warn :class:`CustomBackwardWarning` about ``calls`` (those of the exports that made the IR), naming the
    Functions and the classes of the modules to keep opaque (:func:`advice`); nothing when there are none."""
    if not calls:
        return
    functions = list(dict.fromkeys(c.function for c in calls))
    try:
        found, _ = callers(model, calls, has_handler, opaque)
    except ConversionError:  # a brevitas quantizer no layer owns: the Functions are still named
        found = {}
    classes = list(dict.fromkeys(qualified_name(c.module) for c in found.values()))
    text = custom_backward_message(type(model).__qualname__, names(functions), advice(classes) if classes else None)
    warnings.warn(f"torch2ir: {text}", CustomBackwardWarning, stacklevel=4)


def owning_layer(model: nn.Module, module: nn.Module, path: str) -> tuple[nn.Module, str]:
    """The nearest module at or above ``path`` that owns its subtree (a brevitas layer whose quantizer internals
    fail to trace, or call a straight-through estimator: the layer is kept opaque as a whole), else ``module`` at
    ``path`` itself."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        sub = ".".join(parts[:cut])
        candidate = model.get_submodule(sub)
        if isinstance(candidate, tuple(CONTAINER_TYPES)) or not holds_injectors(candidate):
            continue
        try:
            if owns_subtree(candidate, sub):
                return candidate, sub
        except ConversionError:  # a quantizer proxy: the layer above it may own it
            continue
    return module, path


def caller_path(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    """The nearest module above ``path`` that can call it (a ``ModuleList`` or ``ModuleDict`` holds, never calls),
    and its path (``""``: the root)."""
    while "." in path:
        path = path.rpartition(".")[0]
        module = model.get_submodule(path)
        if not isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            return module, path
    return model, ""


__all__ = ["Caller", "advice", "caller_path", "callers", "owning_layer", "warn"]
