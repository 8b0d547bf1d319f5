"""The IR side of tracing alike blocks once (:mod:`torch2ir.trace_once.trace`): once the IR of an export with stand-ins
is built, each stood-in member and everything below it becomes an unexpanded instance
(:meth:`common.ir.Implementation.instance_of`) of a frozen copy of the traced member's implementation."""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from common.ir import IR, Implementation
from torch2ir.hierarchy.modules import paths_below
from torch2ir.trace_once.trace import StandIns, TraceOnceFallback

__all__ = ["OWN_META", "check_stood_in_calls", "instantiate"]


def check_stood_in_calls(hierarchy: Any, standins: StandIns) -> None:
    """Refuse stand-ins whose call the IR cannot write as the traced member's: a stood-in call without a
    recorded signature, or one passing a value export removed as dead code (the stand-in read none of its
    inputs: brevitas' zero point and bit width) where the traced call's is live; and a traced member (or a module
    below it) called besides the call stood in for: its graph would not be what one call traces.

    Raises:
        TraceOnceFallback: naming the member (the model is then exported in full).
    """
    from torch2ir.signatures.match import Dead
    from torch2ir.trace_once.lower import module_calls

    single: dict[str, str | None] = {}  # traced member -> the path of a module called besides its one call
    for traced_path, path in standins.pairs():
        traced, stood = (hierarchy.signed.get(id(calls[0])) if calls else None
                         for calls in (module_calls(hierarchy, traced_path), module_calls(hierarchy, path)))
        if traced is None or stood is None or len(traced.inputs) != len(stood.inputs):
            raise TraceOnceFallback(f"stood-in {path!r} has no call signature matching the traced {traced_path!r}'s",
                                    implementation=path)
        if any(isinstance(b, Dead) and not isinstance(a, Dead) for a, b in zip(traced.inputs, stood.inputs)):
            raise TraceOnceFallback(f"an input of stood-in {path!r} was removed as dead code", implementation=path)
        if traced_path not in single:
            single[traced_path] = _called_once(hierarchy, traced_path)
        if single[traced_path] is not None:
            raise TraceOnceFallback(f"traced {traced_path!r} (or {single[traced_path]!r} below it) has calls besides "
                                    "the one stood in for others", implementation=traced_path)


def _called_once(hierarchy: Any, traced_path: str) -> str | None:
    """``None`` when module ``traced_path`` has one call and every module below it is called inside it only (its
    graph is then what the stand-ins' calls would trace), else the path of a module called otherwise."""
    from torch2ir.trace_once.lower import module_calls

    home = module_calls(hierarchy, traced_path)
    if len(home) != 1:
        return traced_path
    for p, frames in hierarchy.frames_by_path.items():
        if p.startswith(traced_path + ".") and any(not any(c is home[0] for c in f.chain()) for f in frames):
            return p
    return None


#: ``meta`` entries every implementation has of its own (the module path it came from).
OWN_META = ("source",)


def instantiate(ir: IR, table: Any, standins: StandIns, called: Collection[str]) -> dict[str, str]:
    """Make every stood-in member (and every implementation below it) an unexpanded instance of a frozen copy of
    the traced member's; returns ``{key replaced: key of the traced implementation it is an instance of}``.

    Raises:
        TraceOnceFallback: a stood-in member's keys do not mirror the traced member's, or a member had no call
            of its own in the trace.
    """
    replaced: dict[str, str] = {}
    members = {table.key(p) for group in standins.used() for p in group.paths}
    subtree = paths_below(ir, {k for k in members if k})
    for group in standins.used():
        bodies: dict[str, Implementation] = {}
        for index, ran in sorted(group.stood_in.items()):
            home = table.key(group.paths[ran])
            home_keys = subtree.get(home, [])
            for k in home_keys:
                if k not in bodies:
                    _ = ir[k].graph  # an instance already (it should not be) is expanded before it is copied
                    bodies[k] = copy.deepcopy(ir[k])  # later edits of the traced implementation leave it alone
            key = table.key(group.paths[index])
            if key not in called or home not in called:
                raise TraceOnceFallback(f"stood-in {key!r} or traced {home!r} has no module call of its own",
                                        implementation=key)
            keys = subtree.get(key, [])
            mirrored = [key + k[len(home):] for k in home_keys]
            if sorted(keys) != sorted(mirrored):
                raise TraceOnceFallback(f"stood-in {key!r} has other implementations than traced {home!r}",
                                        implementation=key)
            for k, target in zip(home_keys, mirrored, strict=True):
                old = ir[target]
                if old.aliases or bodies[k].aliases:
                    raise TraceOnceFallback("an aliased module in a stood-in member", implementation=target)
                own = {m: old.meta[m] for m in OWN_META if m in old.meta}
                ir[target] = Implementation.instance_of(target, bodies[k], aliases=[], meta=own)
                replaced[target] = k
    return replaced
