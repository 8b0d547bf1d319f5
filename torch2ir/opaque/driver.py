"""Conversion with opaque leaves (``torch2ir.convert(..., opaque=...)``): which classes are kept opaque, and the
export loop of ``opaque="auto"``, which adds the class of each module whose trace fails, and of the caller of an
opaque leaf that passes it a value read from data, until the export succeeds; and then the class of each module
whose own code calls a custom ``autograd.Function`` (:mod:`torch2ir.opaque.custom_calls`: its backward is not in a
trace), until none does.

``build`` is :mod:`torch2ir.hierarchy.build`'s IR builder, passed in (this package sits below it).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from torch import fx, nn

from common.injectors import is_injector
from common.ir import IR
from common.module_state import kept_attributes
from common.opaque import is_class_name
from torch2ir.frontend import custom_backward
from torch2ir.frontend.export import ExportFailedError, OpaqueCallError
from torch2ir.hierarchy.modules import CONTAINER_TYPES
from torch2ir.opaque.attribution import qualified_name
from torch2ir.opaque.children import GraftError, convert_children, graft, traced_children
from torch2ir.opaque.constructed import owns_subtree
from torch2ir.opaque.custom_calls import caller_path, callers, owning_layer
from torch2ir.opaque.leaves import (
    OpaqueConverter,
    inner_modules,
    keep_tensor_attributes,
    opaque_classes_of,
    opaque_data,
    opaque_modules,
)
from torch2ir.opaque.recording import record
from torch2ir.train.passes import train_differs
from torch2ir.train.record import reads_training

#: ``opaque="auto"`` makes at most this many classes opaque before giving up.
MAX_OPAQUE_CLASSES = 16


def with_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                kwargs: Mapping[str, Any] | None, opaque: str | Collection[type | str],
                known: Mapping[type, str] | None = None, **options: Any) -> IR:
    """:func:`build_ir` with opaque leaves: the classes named in ``opaque``, and with ``"auto"`` (alone or in the list)
    the class of each smallest module whose trace fails (the root's own, when its own code fails), added one at a
    time while the export fails on such a module, then the classes of the modules calling custom autograd.Functions
    (:mod:`torch2ir.opaque.custom_calls`), until none is left. ``known``: classes already found opaque (for a child
    converted on its own).

    A class made opaque only on the way up from an opaque leaf whose caller passes it a value computed from data,
    or calls it otherwise than in eager mode (an :class:`OpaqueCallError`: the leaf's class and each caller's), is
    opaque where its instance is outermost, but not below another opaque leaf: there it is called with the eager
    call's inputs (the value a plain constant), so it is traced on its own, guarded, its conversion finding its own
    opaque leaves again (Longformer: the encoder computing ``is_global_attn`` is opaque, its layers are traced)."""
    # "auto", classes, or both: ["auto", TensorNorm] also keeps every TensorNorm opaque (a train-mode computation)
    auto = opaque == "auto" or (not isinstance(opaque, str) and any(isinstance(e, str) and e == "auto"
                                                                    for e in opaque))
    named = [] if isinstance(opaque, str) and auto else [e for e in opaque if not (isinstance(e, str) and e == "auto")]
    why: dict[type, str] = dict(known or {}) if auto else {}
    why.update((cls, "named in opaque=") for cls in opaque_classes_of(model, named) if cls not in why)
    # classes "auto" made opaque only where a caller passes them a value computed from data, or calls them
    # otherwise than in eager mode: not opaque below an opaque leaf (there they are traced on their own, on the
    # eager call's inputs, and find their own opaque leaves again)
    provisional: set[type] = set()
    while True:
        try:
            # each attempt starts from the model's own attributes (brevitas' counters); with "auto", its warnings
            # are held until it is known to be the last
            with kept_attributes(model), custom_backward.collected() as calls, _holding(auto) as held:
                ir = _build_opaque(build, converter, model, args, kwargs, why, opaque, provisional, **options)
            if auto:  # a module calling a custom autograd.Function is kept opaque: its own backward runs in a rebuild
                found, _ = callers(model, calls, converter.has_handler, why)
                new_callers = {type(c.module): c.why() for c in found.values() if type(c.module) not in why}
                # a brevitas layer whose quantizer computes otherwise in train mode (runtime statistics) too: its
                # constructor makes it again, running its own train-mode code
                new_callers.update((cls, reason) for cls, reason in _train_mode_layers(model, ir, why).items()
                                   if cls not in new_callers)
                if new_callers and len(why) + len(new_callers) <= MAX_OPAQUE_CLASSES:
                    why.update(new_callers)
                    continue
                _replay(held)
            custom_backward.hand_over(calls)  # the caller warns (torch2ir.opaque.custom_calls.warn)
            return ir
        except OpaqueCallError as exc:
            # a caller passes an opaque leaf a value computed from tensor data: its caller is kept opaque instead
            # (up the tree, while the calls of the opaque leaves cannot be kept)
            parents = {type(_caller(model, p)) for p in exc.leaves if p}  # the root included
            new = [cls for cls in parents if cls not in why]
            if not auto or not new or len(why) + len(new) > MAX_OPAQUE_CLASSES:
                raise
            for cls in new:
                why[cls] = f"{exc.caller_reason} ({exc.message[:200]})"
            provisional.update(new)
            provisional.update(cls for cls in (type(model.get_submodule(p)) for p in exc.leaves if p)
                               if why.get(cls, "named in opaque=") != "named in opaque=" and cls not in (known or {}))
        except ExportFailedError as exc:
            failure = getattr(exc, "failure", None)
            module = model if failure is not None and not failure.path else getattr(failure, "module", None)
            reason = getattr(failure, "why", "")
            path = failure.path if failure is not None else ""
            if module is not None and path:  # inside a brevitas layer: the layer, made again by its constructor
                module, path = owning_layer(model, module, path)
            if module is not None and type(module) in why and path:
                # already opaque, so its code ran through another method than forward (Mimi's codebook.encode):
                # the nearest caller above it that is not opaque yet is kept opaque instead
                reason = f"it calls a method of the opaque leaf {path} whose trace fails ({reason[:120]})"
                while type(module) in why and path:
                    module, path = caller_path(model, path)
            if module is not None and path and converter.has_handler(module):
                # a typed leaf (nn.Linear) is never made opaque: the failure is its caller's use of it (Switch
                # Transformers' router moves its classifier to another dtype inside forward)
                reason = f"its use of {path} ({type(module).__name__}) fails to trace ({reason[:120]})"
                while path and (type(module) in why or converter.has_handler(module)):
                    module, path = caller_path(model, path)
            if module is not None and path and _rebuilt(module):
                # a module rebuilt from a graph (a converted model's child traced on its own) has no control flow
                # of its own, and its class cannot be named: its failure is its inputs', charged to its caller
                reason = f"its call of {path} (rebuilt from a graph) fails to trace ({reason[:120]})"
                while path and (type(module) in why or converter.has_handler(module) or _rebuilt(module)):
                    module, path = caller_path(model, path)
            if (not auto or failure is None or module is None or type(module) in why
                    or len(why) >= MAX_OPAQUE_CLASSES):
                raise
            why[type(module)] = reason


@contextlib.contextmanager
def _holding(active: bool) -> Iterator[list[warnings.WarningMessage]]:
    """When ``active``, the warnings of the block, held (the caller replays them, :func:`_replay`, when the attempt is
    the last); a block that raises has them replayed at once, as they would have been shown."""
    if not active:
        yield []
        return
    held: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # the filters apply when they are replayed
            try:
                yield caught
            finally:
                held = list(caught)
    except BaseException:
        _replay(held)
        raise


def _replay(held: list[warnings.WarningMessage]) -> None:
    for caught in held:
        warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)


def _train_mode_layers(model: nn.Module, ir: IR, why: Mapping[type, str]) -> dict[type, str]:
    """The classes of the brevitas layers (owning their subtree, :mod:`torch2ir.opaque.constructed`) holding a
    module whose train mode the rebuild of ``ir`` would not reproduce (a quantizer collecting runtime statistics,
    :func:`torch2ir.train.passes.train_differs`), with why; other such modules are left as they are (warned about,
    as without opaque leaves). When the train-mode pass could not run (``meta["train_trace"]`` says "not checked" or
    "failed": brevitas code reading a value meta and CPU copies cannot give), every module inside a quantizer whose
    code reads ``training`` counts as computing otherwise: the layers holding them stay opaque, as before their
    forward could be traced."""
    found: dict[type, str] = {}
    paths = train_differs(ir)
    if str(ir.root.meta.get("train_trace", "")).startswith(("not checked", "failed")):
        paths += [p for p, m in model.named_modules() if p and reads_training(type(m))]
    for path in dict.fromkeys(paths):
        if path == "root":
            continue
        try:
            module = model.get_submodule(path)
        except AttributeError:
            continue
        parts = path.split(".")
        if not any(is_injector(v) for cut in range(1, len(parts) + 1)
                   for v in vars(model.get_submodule(".".join(parts[:cut]))).values()):
            continue  # not inside a brevitas quantizer
        layer, at = owning_layer(model, module, path)
        if at != path and type(layer) not in why:
            found.setdefault(type(layer), f"its quantizer {path[len(at) + 1:]} computes otherwise in train mode, "
                                          "which the traced graph would not reproduce")
    return found


def _rebuilt(module: nn.Module) -> bool:
    """Whether ``module`` is a ``GraphModule`` whose class cannot be imported by name (ir2torch's rebuild of a
    graph): never an opaque leaf."""
    return isinstance(module, fx.GraphModule) and not is_class_name(qualified_name(module))


def _caller(model: nn.Module, path: str) -> nn.Module:
    """The nearest module above ``path`` that can call it (a ``ModuleList`` or ``ModuleDict`` holds, never calls)."""
    return caller_path(model, path)[0]


def _owned(inner: list[tuple[str, nn.Module]], owning: list[tuple[str, nn.Module]]
           ) -> tuple[list[tuple[str, nn.Module]], list[tuple[str, nn.Module]]]:
    """The inner opaque modules left once the owning leaves (``owning``, and each inner module that owns its
    subtree: a brevitas layer inside an opaque block) have taken what is below them, and those owned modules."""
    roots = [p for p, _ in owning]
    kept = []
    for path, module in sorted(inner, key=lambda item: item[0]):
        if any(path.startswith(r + ".") for r in roots):
            continue
        if owns_subtree(module, path):
            roots.append(path)
        kept.append((path, module))
    owned = [(sub, m) for path, leaf in [*owning, *kept] if path in roots
             for sub, m in leaf.named_modules(prefix=path) if sub != path]
    return kept, owned


def _inside(path: str, children: list[tuple[str, nn.Module]]) -> bool:
    return any(path.startswith(f"{child}.") for child, _ in children)


def _build_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any] | None, why: dict[type, str], opaque: str | Collection[type | str],
                  provisional: Collection[type] = (), **options: Any) -> IR:
    options.pop("trace_once", None)  # every block is traced (a stood-in block's stand-ins would hold the leaves')
    if not why:
        return build(converter, model, args, kwargs, **options)
    modules = opaque_modules(model, why)
    # a leaf whose constructor makes everything below it (a brevitas layer) owns its subtree: nothing below it is
    # traced on its own or kept opaque, the rebuild takes it from the constructor
    # a brevitas quantizer (a module keeping an injector) and what it holds are parts of their layer: never traced
    # on their own, the layer owns them
    quantizers = {id(sub) for m in model.modules() if any(is_injector(v) for v in vars(m).values())
                  for sub in m.modules()}
    owning = [(p, m) for p, m in modules if owns_subtree(m, p)]
    owning_ids = {id(m) for _, m in owning}
    # children of opaque leaves traced on their own; one the opaque code uses besides calling it is opaque too
    # (its own children traced in turn): found by one eager call each round, down the tree
    kept: dict[str, str] = {}
    held: list[tuple[str, nn.Module]] = []
    while True:
        opaque_ids = {id(m) for _, m in held}

        def below(opaque: list[tuple[str, nn.Module]], ids: set[int] = opaque_ids) -> list[tuple[str, nn.Module]]:
            return traced_children([(p, m) for p, m in opaque if id(m) not in quantizers],
                                   converter.has_handler, tuple(CONTAINER_TYPES),
                                   lambda module: (type(module) in why and type(module) not in provisional)
                                   or id(module) in ids or id(module) in quantizers)

        children = below([(p, m) for p, m in [*modules, *held] if id(m) not in owning_ids])
        # an opaque module inside a child traced on its own is that child's conversion's
        modules = [(p, m) for p, m in modules if not _inside(p, children)]
        held = [(p, m) for p, m in held if not _inside(p, children)]
        children = below([(p, m) for p, m in [*modules, *held] if id(m) not in owning_ids])
        standins = record(model, args, kwargs, modules, inputs_of=[p for p, _ in children],
                          keeps_class=lambda m: type(m) in CONTAINER_TYPES or converter.has_handler(m))
        used = [(p, m) for p, m in children if p in standins.uses]
        if not used:
            break
        for path, _ in used:
            kept[path] = f"inside an opaque leaf, which {standins.uses[path].removeprefix('the opaque leaf')}"
        held += used

    def convert(child: nn.Module, child_args: tuple, child_kwargs: dict[str, Any]) -> IR:
        present = {type(m) for m in child.modules()}
        return with_opaque(build, converter, child, child_args, child_kwargs, opaque,
                           known={cls: reason for cls, reason in why.items()
                                  if cls in present and cls not in provisional}, **options)

    done, refused = convert_children(convert, children, standins.inputs)
    kept.update(refused)
    while True:
        inner = inner_modules([(p, m) for p, m in modules if id(m) not in owning_ids], converter, CONTAINER_TYPES,
                              traced=done)
        inner, owned = _owned(inner, owning)
        for path, module in [*modules, *inner]:
            opaque_data(module, path)  # refuses an attribute the IR cannot record, before anything is traced
        ir = build(OpaqueConverter(converter, why, [m for _, m in inner], [m for _, m in owned]), model, args, kwargs,
                   opaque_standins=standins, **options)
        try:
            for path, sub in done.items():
                graft(ir, path, sub)
            break
        except GraftError as exc:  # a module shared across a child's boundary: that child stays opaque
            kept[exc.path] = f"it cannot be traced on its own: {exc}"
            del done[exc.path]
    keep_tensor_attributes(ir, [*modules, *inner, *owned])
    if getattr(ir, "capture", None) is not None:
        if modules and not modules[0][0]:  # the root itself: no export ran
            ir.capture.refused = ("the model's own forward is an opaque leaf (torch.export could not trace it), so no "
                                  "trace of the whole model exists; its children were traced on their own")
        ir.capture.opaque = [*((path, qualified_name(m), why[type(m)]) for path, m in modules),
                             *((path, qualified_name(m),
                               kept.get(path) or why.get(type(m)) or "inside an opaque leaf, without a handler")
                               for path, m in inner),
                             *((f"{path}.{p}" if p else path, cls, reason) for path, sub in done.items()
                               for p, cls, reason in getattr(getattr(sub, "capture", None), "opaque", None) or [])]
    return ir


__all__ = ["MAX_OPAQUE_CLASSES", "with_opaque"]
