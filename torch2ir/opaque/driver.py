"""Conversion with opaque leaves (``torch2ir.convert(..., opaque=...)``): which classes are kept opaque, and the
export loop of ``opaque="auto"``, which adds the class of each module whose trace fails, and of the caller of an
opaque leaf that passes it a value read from data, until the export succeeds; and then the class of each module
whose own code calls a custom ``autograd.Function`` (:mod:`torch2ir.opaque.custom_calls`: its backward is not in a
trace), until none does.

``build`` is :mod:`torch2ir.hierarchy.build`'s IR builder, passed in (this package sits below it).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import IRError
from common.injectors import is_injector
from common.ir import IR
from common.module_state import kept_attributes
from common.opaque import is_class_name
from common.opaque_reads import READS_KEY
from torch2ir.frontend import custom_backward
from torch2ir.frontend.export import ExportFailedError, OpaqueCallError, export
from torch2ir.hierarchy.modules import CONTAINER_TYPES
from torch2ir.opaque.attribution import qualified_name
from torch2ir.opaque.children import GraftError, alike_calls, convert_children, copied_inputs, graft, traced_children
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
    converted on its own)."""
    # "auto", classes, or both: ["auto", TensorNorm] also keeps every TensorNorm opaque (a train-mode computation)
    auto = opaque == "auto" or (not isinstance(opaque, str) and any(isinstance(e, str) and e == "auto"
                                                                    for e in opaque))
    named = [] if isinstance(opaque, str) and auto else [e for e in opaque if not (isinstance(e, str) and e == "auto")]
    why: dict[type, str] = dict(known or {}) if auto else {}
    why.update((cls, "named in opaque=") for cls in opaque_classes_of(model, named) if cls not in why)
    # classes made opaque because the model's trace failed in them or passed them a value computed from data
    traced: set[type] = set()
    called: set[type] = set()
    pruned: set[type] = set()
    fallback: tuple[IR, list[warnings.WarningMessage], Any] | None = None
    while True:
        try:
            # each attempt starts from the model's own attributes (brevitas' counters); with "auto", its warnings
            # are held until it is known to be the last
            with kept_attributes(model), custom_backward.collected() as calls, _holding(auto) as held:
                ir = _build_opaque(build, converter, model, args, kwargs, why, opaque, **options)
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
                # a class the model's trace made opaque, every instance now inside another opaque leaf (a caller,
                # made opaque later): its calls are recorded now, its inputs no longer computed in the trace, so it
                # is traced on its own again (and made opaque again there if its own trace fails)
                again = _enclosed(model, why, traced - called) - pruned
                if again:
                    pruned |= again
                    for cls in again:
                        del why[cls]
                    fallback = (ir, held, calls)
                    continue
                _replay(held)
            custom_backward.hand_over(calls)  # the caller warns (torch2ir.opaque.custom_calls.warn)
            return ir
        except IRError as exc:
            why_next = _next_opaque(exc, model, converter, why, auto, called, (args, kwargs))
            if why_next is None:
                if fallback is None:
                    raise
                # traced on their own again, those classes failed otherwise (an operator outside the surface): the
                # conversion that kept them opaque stands
                ir, held, calls = fallback
                _replay(held)
                custom_backward.hand_over(calls)
                return ir
            why.update(why_next)
            traced.update(why_next)


def _next_opaque(exc: IRError, model: nn.Module, converter: Any, why: Mapping[type, str], auto: bool,
                 called: set[type], call: tuple[tuple, Mapping[str, Any] | None]) -> dict[type, str] | None:
    """The classes ``"auto"`` makes opaque after ``exc`` (``None``: none, ``exc`` stands): the callers of opaque
    leaves passed a value read from data (:class:`OpaqueCallError`), or the smallest module whose trace failed
    (:class:`ExportFailedError`), or its caller when it traces on its own (:func:`_in_context`). Adds to ``called``
    a class whose method other than forward failed."""
    if isinstance(exc, OpaqueCallError):
        # a caller passes an opaque leaf a value computed from tensor data: its caller is kept opaque instead
        # (up the tree, while the calls of the opaque leaves cannot be kept)
        parents = {type(_caller(model, p)) for p in exc.leaves if p}  # the root included
        new = [cls for cls in parents if cls not in why]
        if not auto or not new or len(why) + len(new) > MAX_OPAQUE_CLASSES:
            return None
        return {cls: f"{exc.caller_reason} ({exc.message[:200]})" for cls in new}
    if not isinstance(exc, ExportFailedError):
        return None
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
        called.add(type(module))  # stays opaque: its caller calls its method, not its forward
        while type(module) in why and path:
            module, path = caller_path(model, path)
    if module is not None and path and converter.has_handler(module):
        # a typed leaf (nn.Linear) is never made opaque: the failure is its caller's use of it (Switch
        # Transformers' router moves its classifier to another dtype inside forward)
        reason = f"its use of {path} ({type(module).__name__}) fails to trace ({reason[:120]})"
        while path and (type(module) in why or converter.has_handler(module)):
            module, path = caller_path(model, path)
    if module is not None and path and not is_class_name(qualified_name(module)):
        # a class no file can name (a rebuilt child's GraphModule, whose input guard reads a size its opaque
        # caller computes from data) is never made opaque: its caller is
        reason = f"its call of {path} ({type(module).__name__}) fails to trace ({reason[:120]})"
        while path and (type(module) in why or not is_class_name(qualified_name(module))):
            module, path = caller_path(model, path)
    if not auto or failure is None or module is None or type(module) in why or len(why) >= MAX_OPAQUE_CLASSES:
        return None
    if path and module is failure.module and not converter.has_handler(module):
        caller, at = caller_path(model, path)
        if at and type(caller) not in why and _in_context(model, call, module, path):
            return {type(caller): f"its child {path} ({type(module).__name__}) traces on its own but not in "
                                  f"{at}'s trace ({reason[:120]})"}
    return {type(module): reason}


def _in_context(model: nn.Module, call: tuple[tuple, Mapping[str, Any] | None], module: nn.Module,
                path: str) -> bool:
    """Whether ``module``, whose code failed in the model's trace, traces alone on the inputs of its eager call
    (every call alike): its failure then comes from its context (a size its caller computes from data, as a vision
    tower's ``cu_seqlens``), and its caller is made opaque instead, ``module`` a child traced on its own, its
    inputs guarded in the rebuild. Not for a module that owns its subtree (a brevitas layer)."""
    if owns_subtree(module, path):
        return False
    calls: list[tuple[tuple, dict[str, Any]]] = []
    try:  # on a copy in eval mode, as the opaque leaves' recording runs: the model's state and RNG stay as they are
        twin = copy.deepcopy(model).eval()
        twin.get_submodule(path).register_forward_pre_hook(lambda m, a, kw: calls.append(copied_inputs(a, kw)),
                                                           with_kwargs=True)
        with torch.no_grad():
            twin(*call[0], **dict(call[1] or {}))
    except Exception:  # noqa: BLE001 - no copy, or the eager call itself fails: nothing to decide from
        return False
    if alike_calls(calls) is not None:
        return False
    try:
        export(module, *calls[0], strict=False, dynamic_shapes=None, preserve=[])
    except IRError:
        return False
    return True


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


def _nested(model: nn.Module, why: Mapping[type, str], modules: list[tuple[str, nn.Module]],
            owning: list[tuple[str, nn.Module]], quantizers: set[int]) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of each instance of an opaque class inside one of the outermost opaque ``modules`` (a
    layer of an opaque root), but not inside one that owns its subtree, nor a quantizer: its children are traced
    on their own too."""
    outer = {id(m) for _, m in modules}
    return [(p, m) for p, m in model.named_modules() if p and type(m) in why and id(m) not in outer
            and id(m) not in quantizers and _under(p, modules) and not _under(p, owning)]


def _enclosed(model: nn.Module, why: Mapping[type, str], classes: set[type]) -> set[type]:
    """Those of ``classes`` (opaque) each instance of which lies inside an instance of another opaque class."""
    paths: dict[type, list[str]] = {}
    for path, module in model.named_modules():
        if type(module) in why:
            paths.setdefault(type(module), []).append(path)

    def others(cls: type) -> list[tuple[str, type]]:
        return [(h, other) for other, hs in paths.items() if other is not cls for h in hs]

    return {cls for cls in classes & paths.keys() if all(_under(p, others(cls)) for p in paths[cls])}


def _under(path: str, holders: list[tuple[str, Any]]) -> bool:
    """Whether the module at ``path`` lies strictly below one of ``holders`` (``(path, ...)`` pairs; ``""`` is the
    root, which holds every other module)."""
    return any(path.startswith(f"{h}.") if h else bool(path) for h, _ in holders)


def _build_opaque(build: Callable[..., IR], converter: Any, model: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any] | None, why: dict[type, str], opaque: str | Collection[type | str],
                  **options: Any) -> IR:
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
    # an opaque leaf inside another one (a layer of an opaque root) has its children traced on their own as well
    nested = _nested(model, why, modules, owning, quantizers)
    while True:
        opaque_ids = {id(m) for _, m in held}

        def below(opaque: list[tuple[str, nn.Module]], ids: set[int] = opaque_ids) -> list[tuple[str, nn.Module]]:
            return traced_children([(p, m) for p, m in opaque if id(m) not in quantizers],
                                   converter.has_handler, tuple(CONTAINER_TYPES),
                                   lambda module: type(module) in why or id(module) in ids or id(module) in quantizers)

        children = below([(p, m) for p, m in [*modules, *nested, *held] if id(m) not in owning_ids])
        # an opaque module inside a child traced on its own is that child's conversion's
        modules = [(p, m) for p, m in modules if not _under(p, children)]
        nested = [(p, m) for p, m in nested if not _under(p, children)]
        held = [(p, m) for p, m in held if not _under(p, children)]
        children = below([(p, m) for p, m in [*modules, *nested, *held] if id(m) not in owning_ids])
        standins = record(model, args, kwargs, modules, inputs_of=[p for p, _ in children],
                          keeps_class=lambda m: type(m) in CONTAINER_TYPES or converter.has_handler(m),
                          exact_leaf=lambda m: converter.has_handler(m) and not m._modules)
        used = [(p, m) for p, m in children if p in standins.uses]
        if not used:
            break
        for path, _ in used:
            use = standins.uses[path].removeprefix("the opaque leaf's ")
            kept[path] = f"inside an opaque leaf, whose {use}"
        held += used

    def convert(child: nn.Module, child_args: tuple, child_kwargs: dict[str, Any]) -> IR:
        present = {type(m) for m in child.modules()}
        return with_opaque(build, converter, child, child_args, child_kwargs, opaque,
                           known={cls: reason for cls, reason in why.items() if cls in present}, **options)

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
    for path, reads in standins.reads.items():  # what the opaque code reads of a graph child, its rebuild repeats
        if path in done and ir[path].type == "module":
            ir[path].meta[READS_KEY] = copy.deepcopy(reads)
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
