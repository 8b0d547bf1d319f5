"""Which module's own trace fails when ``torch.export`` fails on a model.

Export's errors name a symbol (``Eq(u0, 1)``), an operator or a line of code, never the module. Two ways to find
it, cheapest first:

- **the traceback**: non-strict export runs the model's own Python, so the failing module's frames are on the
  stack of the exception (or of one it chains to, ``__cause__`` / ``__context__``). The innermost frame whose
  ``self`` is a module of the model (matched by identity, or by ``__dict__`` identity: export may run a module
  through an attribute proxy sharing its ``__dict__``) is the smallest module whose own code failed;
- **alone**: when the traceback holds none (strict export runs the code under dynamo), each candidate is exported
  alone on the inputs one eager call of a *copy* of the model gave it (the model's own state does not move); the
  first that fails is reported. Candidates are given by the caller (quantization observers, :mod:`..observers`).
"""

from __future__ import annotations

import copy
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


def qualified_name(module: nn.Module | type) -> str:
    """``package.module.Class`` of ``module`` (or of the class itself)."""
    cls = module if isinstance(module, type) else type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def reason(exc: BaseException) -> str:
    """``ExceptionType: first line of its message`` (at most 200 characters of it)."""
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


@dataclass(frozen=True)
class Failure:
    """The smallest module whose trace failed: ``path`` (``""`` for the root), its class and why."""

    path: str
    module: nn.Module
    why: str

    @property
    def qualname(self) -> str:
        return qualified_name(self.module)

    def describe(self) -> str:
        """``path (package.module.Class): why``."""
        return f"{self.path or '(the root)'} ({self.qualname}): {self.why}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it chains to (causes first, then contexts), each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def _frames(tb: types.TracebackType | None) -> Iterator[types.FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


ModuleIndex = dict[int, tuple[str, nn.Module]]


def module_index(model: nn.Module) -> ModuleIndex:
    """``model``'s modules (first path of each) by ``id`` of the module and of its ``__dict__`` (for
    :func:`find_module`)."""
    by_id: ModuleIndex = {}
    for path, module in model.named_modules(remove_duplicate=False):
        by_id.setdefault(id(module), (path, module))
        by_id.setdefault(id(module.__dict__), (path, module))
    return by_id


def find_module(by_id: ModuleIndex, owner: Any) -> tuple[str, nn.Module] | None:
    """The path and module ``owner`` is (by identity, or by ``__dict__`` identity: export may run a module through
    an attribute proxy sharing its ``__dict__``), ``None`` when it is none of the indexed model's."""
    hit = by_id.get(id(owner))
    if hit is None:
        try:
            hit = by_id.get(id(object.__getattribute__(owner, "__dict__")))
        except AttributeError:
            hit = None
    return hit


def in_traceback(exc: BaseException, model: nn.Module) -> tuple[str, nn.Module] | None:
    """The path and module of the innermost frame, on the stack of ``exc`` or of an exception it chains to, whose
    ``self`` is a module of ``model``; ``None`` when there is none. The deepest exception of the chain that has
    one wins (a wrapper's traceback stops where it caught the original)."""
    by_id = module_index(model)
    found: tuple[str, nn.Module] | None = None
    for current in _chain(exc):
        innermost = None
        for frame in _frames(current.__traceback__):
            owner = frame.f_locals.get("self") if "self" in frame.f_code.co_varnames else None
            hit = None if owner is None else find_module(by_id, owner)
            if hit is not None:
                innermost = hit
        if innermost is not None:
            found = innermost
    return found


def alone(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None,
          candidates: Iterable[tuple[str, nn.Module]]) -> Failure | None:
    """The first of ``candidates`` (``(path, module)`` of ``model``, in order) that ``torch.export`` cannot trace
    alone on the inputs it receives in one eager call of a copy of ``model``; ``None`` when none fails, when the
    model cannot be copied or when the eager call fails (export's own error then says more)."""
    candidates = list(candidates)
    if not candidates:
        return None
    try:
        twin = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - a model that cannot be copied is not diagnosed
        return None
    wanted = {path for path, _ in candidates}
    seen: dict[str, tuple[tuple, dict]] = {}
    hooks = []
    for path, module in twin.named_modules():
        if path in wanted:
            hooks.append(module.register_forward_pre_hook(
                lambda mod, inputs, kw, path=path: seen.setdefault(path, (_detached(inputs), dict(_detached(kw)))),
                with_kwargs=True))
    try:
        with torch.no_grad():
            twin(*args, **dict(kwargs or {}))
    except Exception:  # noqa: BLE001 - the eager call fails too: export's own error says more
        return None
    finally:
        for hook in hooks:
            hook.remove()
    for path, module in candidates:
        if path not in seen:
            continue
        inputs, kw = seen[path]
        try:
            torch.export.export(copy.deepcopy(module), inputs, kw, strict=False)
        except Exception as exc:  # noqa: BLE001 - this is the answer
            return Failure(path, module, reason(exc))
    return None


def _detached(values: Any) -> Any:
    if isinstance(values, dict):
        return {k: _detached(v) for k, v in values.items()}
    return tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in values)


def attribute_failure(exc: BaseException, model: nn.Module) -> Failure | None:
    """The smallest module of ``model`` whose own code raised ``exc`` (an export's error), found on its traceback
    (:func:`in_traceback`); ``None`` when the traceback holds no frame of the model's modules."""
    hit = in_traceback(exc, model)
    if hit is None:
        return None
    return Failure(hit[0], hit[1], reason(exc))


__all__ = ["Failure", "ModuleIndex", "alone", "attribute_failure", "find_module", "in_traceback", "module_index",
           "qualified_name", "reason"]
