"""The stand-ins of :mod:`torch2ir.trace_once.trace` again, for the eager train-mode passes on meta tensors
(:func:`torch2ir.train.record.record_train_ops`), whose records a stood-in member then gets from its traced
member."""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from torch2ir.hierarchy.modules import paths_below
from torch2ir.trace_once.trace import MODULE_FILE, SCALARS, Group, StandIns, input_key, output_record, stand_in
from torch2ir.trace_once.watch import watching


class EagerStandIns:
    """The stand-ins again, for the eager train-mode passes on meta tensors
    (:func:`torch2ir.train.record.record_train_ops`): a member stood in for during the export is stood in for again
    when its input key matches the one its traced member ran with in the same pass, and the records of the traced
    member's subtree are copied to it (:meth:`complete`)."""

    def __init__(self, standins: StandIns, model: nn.Module) -> None:
        self.model = model
        self.pairs: list[tuple[Group, int, int]] = [(g, i, ran) for g in standins.used()
                                                    for i, ran in g.stood_in.items()]
        self.done: dict[str, str] = {}  # stood-in member path -> path of the member that ran
        self.records: dict[tuple[int, int], dict[Any, Any]] = {}
        self.unalike: set[int] = set()  # groups whose member read a watched attribute in this pass

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        self.done, self.records, self.unalike = {}, {}, set()
        wrapped: list[nn.Module] = []
        ran_of = {(id(g), i): ran for g, i, ran in self.pairs}
        try:
            for group, index, ran in self.pairs:
                for member in (ran, index):
                    module = group.modules[member]
                    if "forward" in module.__dict__:
                        continue
                    module.forward = self._forward(group, member, ran_of.get((id(group), member)), module.forward)
                    wrapped.append(module)
            yield
        finally:
            for module in wrapped:
                module.__dict__.pop("forward", None)

    def _forward(self, group: Group, member: int, ran: int | None, original: Any) -> Any:
        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            if sys._getframe(1).f_code.co_filename != MODULE_FILE:
                return original(*args, **kwargs)
            key = input_key(args, kwargs)
            path = group.paths[member]
            if ran is None:  # a member that runs for real: record its outputs by input key
                with watching(group.modules[member], group.watched) as reads:
                    out = original(*args, **kwargs)
                if reads:  # in this mode it reads its index: every member runs for real in this pass
                    self.unalike.add(id(group))
                if key is not None:
                    leaves, spec = pytree.tree_flatten(out)
                    if all(isinstance(t, (torch.Tensor, *SCALARS)) for t in leaves):
                        self.records.setdefault((id(group), member), {}).setdefault(
                            key, (spec, [output_record(t) for t in leaves]))
                return out
            recorded = self.records.get((id(group), ran), {}).get(key) if key is not None else None
            if recorded is None or path in self.done or id(group) in self.unalike:
                return original(*args, **kwargs)
            self.done[path] = group.paths[ran]
            with torch._C.DisableTorchFunction():  # not the recorder's: complete() copies the traced member's
                out = stand_in(recorded)
                with torch.no_grad():  # a pass on CPU copies computes on values: zeros, not uninitialised memory
                    for t in pytree.tree_leaves(out):
                        if isinstance(t, torch.Tensor) and t.device.type != "meta":
                            t.zero_()
                return out

        return forward

    def complete(self, ops: Any) -> Any:
        """Copy the records of each traced member's subtree to the members stood in for in the pass just run (the
        ``dropouts``, ``randoms``, ``calls`` and ``norms`` of :class:`~torch2ir.train.record.TrainOps`, and its
        ``written`` tensors by name); returns ``ops``."""
        if ops is None:
            return None
        roots = {*self.done, *self.done.values()}
        for table in (ops.dropouts, ops.randoms, ops.calls, ops.norms):
            # a member that ran is never below a stood-in one: the records copied never come from records copied
            below = paths_below(list(table), roots)
            for path, home in self.done.items():
                for p in below.get(path, []):
                    table.pop(p, None)
                for p in below.get(home, []):
                    value = table[p]
                    if table is ops.calls:
                        value = [f"module {path}{n[7 + len(home):]}" if n.startswith("module ") and inside(n[7:], home)
                                 else n for n in value]
                    table[path + p[len(home):]] = copy.copy(value)
        for path, home in self.done.items() if ops.written else ():
            source, target = self.model.get_submodule(home), self.model.get_submodule(path)
            for name, t in (*source.named_parameters(), *source.named_buffers()):
                if id(t) in ops.written:
                    owner, _, attr = name.rpartition(".")
                    holder = target.get_submodule(owner) if owner else target
                    mirrored = holder._parameters.get(attr, holder._buffers.get(attr))
                    if mirrored is not None:
                        ops.written.add(id(mirrored))
        return ops


def inside(path: str, root: str) -> bool:
    """Whether module ``path`` is ``root`` or below it."""
    return path == root or path.startswith(root + ".")


__all__ = ["EagerStandIns"]
