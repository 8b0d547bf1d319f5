"""The eager call behind opaque leaves: one call of a *copy* of the model (eval mode, no grad) records what each
opaque module returns, and the inputs of the children of opaque leaves traced on their own
(:mod:`torch2ir.opaque.children`); during the export each opaque module's forward is replaced by a stand-in
returning fresh tensors of the recorded metadata (:func:`torch2ir.trace_once.trace.stand_in`)."""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.errors import ConversionError
from torch2ir.opaque.children import copied_inputs
from torch2ir.opaque.same_call import call_record, difference, refuse
from torch2ir.opaque.watch import Watch
from torch2ir.trace_once.trace import output_record, stand_in


class StandIns:
    """The recorded outputs of each opaque module, per call, and the stand-in forwards that replay them."""

    def __init__(self, modules: list[tuple[str, nn.Module]], records: dict[str, list[Any]],
                 inputs: dict[str, list[tuple[tuple, dict[str, Any]]]] | None = None,
                 uses: dict[str, str] | None = None, eager_calls: dict[str, list[Any]] | None = None,
                 reads: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
        self.modules = modules
        self.records = records
        #: ``{path: [call_record of each eager call]}``: a traced call must match (:mod:`.same_call`)
        self.eager_calls = eager_calls or {}
        #: ``{path: what the opaque code does with it besides calling it}`` of watched modules (:class:`Watch`)
        self.uses = uses or {}
        #: ``{path: {"attributes": ..., "modules": ...}}``: what the opaque code reads of a watched module that its
        #: rebuild repeats (:mod:`common.opaque_reads`)
        self.reads = reads or {}
        #: ``{path: [(args, kwargs) of each call]}`` of the modules ``record`` was asked to watch (``inputs_of``)
        self.inputs = inputs or {}
        self.calls: dict[str, int] = {}

    def reset(self) -> None:
        self.calls.clear()

    def forward_of(self, path: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            index = self.calls.get(path, 0)
            self.calls[path] = index + 1
            records = self.records[path]
            if index >= len(records):
                raise ConversionError(
                    f"the opaque leaf {path} is called more often while traced than in the eager call",
                    implementation=path, hint="an opaque leaf must be called alike in eager mode and while traced")
            eager = self.eager_calls.get(path)
            if eager is not None and index < len(eager):
                why = difference(eager[index], args, kwargs)
                if why is not None:
                    raise refuse(path, index, why)
            return stand_in(records[index], writable=False)
        return forward

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        patched = []
        try:
            for path, module in self.modules:
                if "forward" not in vars(module):
                    module.forward = self.forward_of(path)
                    patched.append(module)
            yield
        finally:
            for module in patched:
                vars(module).pop("forward", None)


def record(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None,
           modules: list[tuple[str, nn.Module]], inputs_of: Iterable[str] = (),
           keeps_class: Callable[[nn.Module], bool] = lambda m: False,
           exact_leaf: Callable[[nn.Module], bool] = lambda m: False) -> StandIns:
    """Run a copy of ``model`` once (eval mode, no grad) and record what each opaque module returns, and the
    inputs of each call of the modules at the paths ``inputs_of`` (:func:`torch2ir.opaque.children.copied_inputs`)
    and what the model's code does with them besides calling them (:class:`~torch2ir.opaque.watch.Watch`;
    ``keeps_class``: whether a module inside one is rebuilt as its own class, ``exact_leaf``: and everything
    below it).

    Raises:
        ConversionError: the model cannot be copied, fails in eager mode, or an opaque module returns a value
            other than tensors and plain scalars in tuples, lists and dicts.
    """
    try:
        with warnings.catch_warnings():  # torch's deprecation notes about the treespecs a rebuilt model holds
            warnings.simplefilter("ignore", FutureWarning)
            twin = copy.deepcopy(model)
    except Exception as exc:
        raise ConversionError(f"opaque leaves need a copy of the model, which fails: {type(exc).__name__}: {exc}",
                              implementation="root", hint="make the model deep-copyable") from exc
    wanted = {path for path, _ in modules}
    records: dict[str, list[Any]] = {path: [] for path in wanted}
    hooks = []

    def keep(path: str) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            leaves, spec = pytree.tree_flatten(output)
            bad = [type(x).__name__ for x in leaves if not isinstance(x, (torch.Tensor, int, float, bool, type(None)))]
            if bad:
                raise ConversionError(f"the opaque leaf {path} returns {bad[0]}, which a stand-in cannot repeat",
                                      implementation=path, hint="an opaque leaf returns tensors and scalars")
            records[path].append((spec, [output_record(x) for x in leaves]))
        return hook

    eager_calls: dict[str, list[Any]] = {path: [] for path in wanted if path}

    def called(path: str) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            eager_calls[path].append(call_record(args, kwargs))
        return hook

    watched = set(inputs_of)
    inputs: dict[str, list[tuple[tuple, dict[str, Any]]]] = {path: [] for path in watched}

    def watch(path: str) -> Any:
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            inputs[path].append(copied_inputs(args, kwargs))
        return hook

    for path, module in twin.named_modules(remove_duplicate=False):
        if path in wanted and path:  # an opaque root is not traced: nothing stands in for it
            hooks.append(module.register_forward_hook(keep(path)))
            hooks.append(module.register_forward_pre_hook(called(path), with_kwargs=True))
            wanted.discard(path)
        if path in watched:
            hooks.append(module.register_forward_pre_hook(watch(path), with_kwargs=True))
            watched.discard(path)
    watch = Watch(twin, list(inputs), keeps_class, exact_leaf)
    try:
        flags = [(m, m.training) for m in twin.modules()]
        for m, _ in flags:
            m.training = False
        with torch.no_grad(), watch.installed():
            twin(*args, **dict(kwargs or {}))
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"the model fails in eager mode on these inputs: {type(exc).__name__}: {exc}",
                              implementation="root", hint="check the example inputs") from exc
    finally:
        for hook in hooks:
            hook.remove()
    reads = watch.reads()
    return StandIns(modules, records, inputs, watch.uses, eager_calls, reads)


__all__ = ["StandIns", "record"]
