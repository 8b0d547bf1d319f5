"""Small, safe rewrites of an IR that hardware teams do by hand otherwise.

Every rewrite keeps each implementation's ``meta["source"]`` (its original module path),
so :func:`common.remap_state_dict` still loads the original weights afterwards.
"""

from __future__ import annotations

from common.errors import IRFormatError, MissingImplementationError
from common.ir import IR, NODE_KINDS


def _moved(key: str, old: str, new: str) -> str:
    if key == old:
        return new
    if key.startswith(old + "."):
        return new + key[len(old) :]
    return key


def _relative(caller: str, callee: str) -> str | None:
    if caller == "root":
        return callee
    return callee[len(caller) + 1 :] if callee.startswith(caller + ".") else None


def rename_implementation(ir: IR, old: str, new: str) -> IR:
    """Move implementation ``old`` (and everything below it) to module path ``new``.

    Call nodes, their attribute paths, aliases and ties follow. Returns ``ir`` (changed in place).

    Raises:
        MissingImplementationError: ``old`` is not in the IR.
        IRFormatError: ``new`` is taken, or one of the two is ``"root"``.
    """
    if old not in ir:
        raise MissingImplementationError(f"cannot rename {old!r}: no such implementation", key=old)
    if "root" in (old, new) or new in ir:
        raise IRFormatError(f"cannot rename {old!r} to {new!r}", key=new,
                            hint="the new path must be free and neither may be 'root'")
    impls = list(ir.values())
    for impl in impls:
        del ir[impl.name]
    for impl in impls:
        was = impl.name
        impl.name = _moved(was, old, new)
        for variant in impl.variants:
            variant.name = impl.name
        for _, attrs in (item for graph in impl.graphs() for item in graph.graph.nodes(data=True)):
            target = attrs.get("implementation")
            if attrs["type"] in NODE_KINDS or not isinstance(target, str):
                continue
            old_rel = attrs.get("target") or _relative(was, target)
            attrs["implementation"] = _moved(target, old, new)
            moved_rel = _moved(old_rel, old if was == "root" else _relative(was, old) or old,
                               new if was == "root" else _relative(impl.name, new) or new) if old_rel else None
            if moved_rel is not None and moved_rel != _relative(impl.name, attrs["implementation"]):
                attrs["target"] = moved_rel
            else:
                attrs.pop("target", None)
        for rec in impl.state.values():
            tie = rec.get("tie")
            if isinstance(tie, str):
                owner, _, name = tie.rpartition(".")
                rec["tie"] = f"{_moved(owner, old, new)}.{name}" if owner else tie
        ir[impl.name] = impl
    return ir
