"""brevitas' branches on its quantizers' state, decided while a conversion exports as the eager call decided them,
and asserted in the graph.

brevitas 0.13 branches on tensor data in a few places whose outcome decides the *type* of what a layer returns, not
its values, and ``torch.export`` cannot trace a branch on data:

- ``brevitas.quant_tensor.int_torch_handler.quant_layer``: ``(quant_input.zero_point != 0.0).any() or
  (quant_weight.zero_point != 0.0).any()`` (``bool`` of a tensor) and ``torch.allclose(bias.scale, output_scale)``;
- ``BaseQuantTensor.check_scaling_factors_same``, ``check_zero_points_same``, ``check_bit_width_same``:
  ``torch.allclose`` of two ``QuantTensor``\\ s' scales, zero points, bit widths (adding two ``IntQuantTensor``\\ s).

:func:`decided` runs the model once in eager mode (eval mode, without gradients, the model's attributes and the
random state put back after), noting each outcome of these conditions per *site* (the brevitas function and the
innermost module whose code called it) in call order; while the export then traces, each such condition takes the
outcome noted for its site, in the same order, and the graph gets a node asserting it,
``aten._assert_async.msg(cond, "...")`` (``cond``: the condition, or its negation for a noted ``False``; for
``allclose``, ``isclose(a, b, rtol, atol, equal_nan).all()``, which is what ``torch.allclose`` computes). A rebuild
whose parameters make one flip raises naming the function and the module instead of computing the other branch's
values.

A condition is decided only when it is computed from the model's parameters, buffers, tensor attributes and
constants alone: its node's ancestors in the graph being traced reach no other placeholder (no input of the model).
Otherwise, or when the trace reaches a site more often than the eager run did, or outside a conversion's export,
the original runs (and export fails on it as before, so ``opaque="auto"`` keeps the layer opaque). The functions are
found by their code objects in the brevitas modules already imported: brevitas is never imported here, and a
release whose functions moved is simply not decided.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from torch2ir.frontend.shared_patch import SharedPatch

#: ``(module, qualified name)`` of each brevitas function whose data-dependent conditions are decided.
SITES: tuple[tuple[str, str], ...] = (
    ("brevitas.quant_tensor.int_torch_handler", "quant_layer"),
    *(("brevitas.quant_tensor.base_quant_tensor", f"{mixin}.check_{what}_same")
      for mixin in ("IntMixin", "FloatMixin") for what in ("scaling_factors", "zero_points", "bit_width")),
)

_LOCAL = threading.local()
_ORIGINAL: dict[str, Any] = {}
#: Frames looked at above a site for the module whose code called it.
_MAX_FRAMES = 60


def _code_objects() -> dict[Any, str]:
    """The code object of each function of :data:`SITES` already imported -> ``"module.qualname"``."""
    found: dict[Any, str] = {}
    for module_name, qualname in SITES:
        obj: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        code = getattr(obj, "__code__", None)
        if code is not None:
            found[code] = f"{module_name}.{qualname}"
    return found


def _paths(model: nn.Module) -> dict[int, str]:
    """``id(module.__dict__)`` -> path of each module of ``model``: export's tracer calls a module through a proxy
    object of a subclass sharing its ``__dict__``."""
    return {id(m.__dict__): path for path, m in model.named_modules()}


class _Run:
    """The outcomes one eager run noted per site, and the export's progress through them (per thread)."""

    def __init__(self, model: nn.Module, codes: dict[Any, str]) -> None:
        self.codes = codes
        self.model = model
        self.paths = _paths(model)
        #: ``{(code, module path, kind): [outcome of each call]}``
        self.noted: dict[tuple[Any, str | None, str], list[bool]] = {}
        self.taken: dict[tuple[Any, str | None, str], int] = {}
        self.noting = True
        self.replay = False
        self.state_nodes: set[Any] | None = None

    def site(self, frame: Any) -> tuple[Any, str | None] | None:
        """``(code, module path)`` of the site whose code ``frame`` runs (the path of the innermost module of the
        model whose code called it; None: none), or None (not a site)."""
        code = frame.f_code
        if code not in self.codes:
            return None
        caller = frame
        for _ in range(_MAX_FRAMES):
            if caller is None:
                break
            owner = caller.f_locals.get("self") if "self" in caller.f_code.co_varnames else None
            if isinstance(owner, nn.Module) and id(owner.__dict__) in self.paths:
                return code, self.paths[id(owner.__dict__)]
            caller = caller.f_back
        return code, None

    def restart(self, model: nn.Module) -> None:
        """Replay from the first noted outcome, tracing ``model`` (the one noted, or the module export traces
        for it: a view sharing its children)."""
        self.replay = True
        self.taken.clear()
        self.state_nodes = None
        self.model = model
        self.paths = _paths(model)

    @property
    def decided(self) -> int:
        """How many conditions the current trace took from the noted ones."""
        return sum(self.taken.values())


def _active() -> _Run | None:
    return getattr(_LOCAL, "run", None)


def _proxy_node(tensor: torch.Tensor) -> Any:
    from torch.fx.experimental import proxy_tensor

    mode = proxy_tensor.get_proxy_mode()
    if mode is None or not proxy_tensor.has_proxy_slot(tensor, mode.tracer):
        return None
    return proxy_tensor.get_proxy_slot(tensor, mode.tracer).proxy.node


def _state_nodes(run: _Run) -> set[Any]:
    """The graph nodes of the model's parameters, buffers and tensor attributes as the trace sees them."""
    if run.state_nodes is None:
        tensors = [*run.model.parameters(), *run.model.buffers()]
        for module in run.model.modules():
            tensors.extend(v for v in vars(module).values() if isinstance(v, torch.Tensor))
        nodes = (_proxy_node(t) for t in tensors)
        run.state_nodes = {n for n in nodes if n is not None}
    return run.state_nodes


def _from_state(run: _Run, tensors: tuple[torch.Tensor, ...]) -> bool:
    """Whether every placeholder the graph nodes of ``tensors`` derive from is a parameter, buffer or tensor
    attribute of the model (False when a tensor has no node: not traced by a proxy mode)."""
    state = _state_nodes(run)
    stack = []
    for tensor in tensors:
        node = _proxy_node(tensor)
        if node is None:
            return False
        stack.append(node)
    seen: set[Any] = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder" and node not in state:
            return False
        stack.extend(node.all_input_nodes)
    return True


def _decide(run: _Run, frame: Any, cond: Callable[[], torch.Tensor], operands: tuple[torch.Tensor, ...],
            original: Callable[[], bool], kind: str) -> bool:
    """The outcome of a condition at a site: noted (eager run), or replayed and asserted (export)."""
    site = run.site(frame)
    if site is None:
        return original()
    key = (site[0], site[1], kind)
    if run.noting:
        outcome = bool(original())
        run.noted.setdefault(key, []).append(outcome)
        return outcome
    noted, taken = run.noted.get(key, []), run.taken.get(key, 0)
    if not run.replay or taken >= len(noted) or not _from_state(run, operands):
        return original()
    outcome = noted[taken]
    run.taken[key] = taken + 1
    value = cond()
    where = "the root" if site[1] == "" else site[1] or "the model's code"
    message = (f"torch2ir: brevitas' {run.codes[site[0]]} in {where}: {kind} was {outcome} when the model was "
               f"converted (a graph of that branch); it is {not outcome} now")
    torch.ops.aten._assert_async.msg(value if outcome else torch.logical_not(value), message)
    return outcome


def _bool(tensor: torch.Tensor) -> bool:
    original = _ORIGINAL["__bool__"]
    run = _active()
    if run is None:
        return original(tensor)
    frame = sys._getframe(1)
    return _decide(run, frame, lambda: tensor.to(torch.bool).reshape(()), (tensor,),
                   lambda: original(tensor), "bool of a tensor")


def _allclose(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08,
              equal_nan: bool = False) -> bool:
    original = _ORIGINAL["allclose"]
    run = _active()
    if run is None:
        return original(a, b, rtol, atol, equal_nan)
    frame = sys._getframe(1)
    return _decide(run, frame, lambda: torch.isclose(a, b, rtol, atol, equal_nan).all(), (a, b),
                   lambda: original(a, b, rtol, atol, equal_nan), "allclose")


def _install() -> Callable[[], None]:
    """``torch.Tensor.__bool__`` and ``torch.allclose`` deciding the sites' conditions on the threads with a run;
    returns what puts the originals back."""
    had_bool = "__bool__" in torch.Tensor.__dict__
    _ORIGINAL["__bool__"] = torch.Tensor.__bool__
    _ORIGINAL["allclose"] = torch.allclose
    torch.Tensor.__bool__ = _bool  # type: ignore[method-assign]
    torch.allclose = _allclose  # type: ignore[assignment]

    def undo() -> None:
        torch.allclose = _ORIGINAL["allclose"]
        if had_bool:
            torch.Tensor.__bool__ = _ORIGINAL["__bool__"]  # type: ignore[method-assign]
        else:
            del torch.Tensor.__bool__
        _ORIGINAL.clear()

    return undo


_PATCHED = SharedPatch(_install)


def uses_brevitas(model: nn.Module) -> bool:
    """Whether a module of ``model`` is of a brevitas class (and brevitas' sites are imported)."""
    if "brevitas.quant_tensor.int_torch_handler" not in sys.modules:
        return False
    return any(type(m).__module__.startswith("brevitas.") for m in model.modules())


@contextlib.contextmanager
def decided(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None) -> Iterator[_Run | None]:
    """Within the block, this thread's exports decide brevitas' conditions (module docstring) as a call of a copy
    of ``model`` on ``args``, ``kwargs`` (eval mode, no gradients, the random state put back) decided them; each
    export replays them from the first (:func:`replaying`). Yields the run, or None: no brevitas module, or the
    copy or the eager call failed (nothing is decided)."""
    codes = _code_objects() if uses_brevitas(model) else {}
    if not codes:
        yield None
        return
    outer = _active()
    with _PATCHED.entered():
        try:
            run: _Run | None = None
            try:
                copied = copy.deepcopy(model)
                for module in copied.modules():
                    module.training = False
                run = _Run(copied, codes)
                _LOCAL.run = run
                with torch.no_grad(), torch.random.fork_rng(devices=[]):
                    copied(*args, **dict(kwargs or {}))
            except Exception:  # noqa: BLE001 - nothing is decided; the export reports the model's own failure
                run = None
            else:
                run.noting = False
            _LOCAL.run = run
            yield run
        finally:
            _LOCAL.run = outer


@contextlib.contextmanager
def replaying(model: nn.Module) -> Iterator[None]:
    """Within the block, this thread's trace of ``model`` (the module noted, or the one export traces for it: a view
    sharing its children) takes the noted outcomes from the first (nothing when no :func:`decided` block is open)."""
    run = _active()
    if run is None:
        yield
        return
    run.restart(model)
    try:
        yield
    finally:
        run.replay = False


__all__ = ["SITES", "decided", "replaying", "uses_brevitas"]
