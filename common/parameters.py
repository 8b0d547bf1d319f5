"""The original ``forward`` signature of a module rebuilt from its graph: ``meta["parameters"]``.

torch2ir records, for each module whose calls it traced with their arguments, the parameters of the
original ``forward`` in order: ``[name, kind]`` for a parameter the traced call gave a value, and
``[name, kind, default]`` for one it left at its default (the graph was traced with that value).
``kind`` is ``"positional_only"``, ``"positional_or_keyword"`` or ``"keyword_only"``; the items of a
``**kwargs`` the call used appear as keyword-only parameters. Parameters given in the trace are exactly
``meta["forward_arg_names"]``.

ir2torch writes the rebuilt ``forward``'s ``def`` line from this record, so ``inspect.signature`` shows
the original's names, order, keyword-only markers and defaults; defaults are passed to the generated
code as values under names the rebuilder makes, never as source text.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from .errors import IRFormatError
from .names import ARGUMENT_RESERVED_NAMES, check_identifier

#: ``kind`` in the file -> :class:`inspect.Parameter` kind.
KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
}
_ORDER = list(KINDS.values())
#: Marks a parameter without a default.
NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One parameter of a recorded ``forward``."""

    name: str
    kind: inspect._ParameterKind
    default: Any = NO_DEFAULT
    traced: bool = True  # the traced call gave it a value

    def to_list(self) -> list[Any]:
        kind = next(k for k, v in KINDS.items() if v is self.kind)
        return [self.name, kind] if self.default is NO_DEFAULT else [self.name, kind, self.default]


def parse_parameters(raw: object, traced: list[str], *, implementation: str | None = None,
                     field: str = "meta.parameters") -> list[Param]:
    """Read ``meta["parameters"]``, checking it against the traced argument names.

    Raises:
        IRFormatError: not a list of ``[name, kind(, default)]`` in a valid Python order, or the parameters
            without a default are not exactly the traced ones in ``traced``.
        UnsafeNameError: a name is not an identifier or shadows a name generated code uses.
    """
    def bad(message: str) -> IRFormatError:
        return IRFormatError(message, implementation=implementation, key=field,
                             hint="each item is [name, kind] or [name, kind, default]; kinds: " + ", ".join(KINDS))

    if not isinstance(raw, list):
        raise bad("parameters must be a list")
    out: list[Param] = []
    names = set(traced)
    for i, item in enumerate(raw):
        if not isinstance(item, (list, tuple)) or len(item) not in (2, 3):
            raise bad(f"parameter {i} is not [name, kind] or [name, kind, default]")
        name, kind = item[0], item[1]
        check_identifier(name, f"{field}[{i}]", implementation=implementation, forbidden=ARGUMENT_RESERVED_NAMES)
        if not isinstance(kind, str) or kind not in KINDS:
            raise bad(f"parameter {name!r} has unknown kind {str(kind)[:40]!r}")
        param = Param(name, KINDS[kind], item[2] if len(item) == 3 else NO_DEFAULT, name in names)
        if not param.traced and param.default is NO_DEFAULT:
            raise bad(f"parameter {name!r} was not given in the traced call and has no default")
        if out and _ORDER.index(param.kind) < _ORDER.index(out[-1].kind):
            raise bad(f"parameter {name!r} ({kind}) comes after a {out[-1].to_list()[1]} one")
        if (param.kind is not KINDS["keyword_only"] and param.default is NO_DEFAULT and
                any(p.default is not NO_DEFAULT and p.kind is not KINDS["keyword_only"] for p in out)):
            raise bad(f"positional parameter {name!r} without a default follows one with a default")
        out.append(param)
    listed = [p.name for p in out]
    if len(set(listed)) != len(listed) or not names <= set(listed):
        raise bad(f"parameters {listed!r} repeat a name or miss a traced argument of {sorted(names)!r}")
    return out


__all__ = ["KINDS", "NO_DEFAULT", "Param", "parse_parameters"]
