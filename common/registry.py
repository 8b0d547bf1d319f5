"""Handler registries shared by torch2ir (keyed by module class) and ir2torch (keyed by type).

``register`` refuses a key that already has a handler, ``register_override`` refuses a
key that has none: a typo never silently adds a second, unused handler. Overrides may be
*scoped* with ``where=``: a glob over implementation paths (``"encoder.layer.*"``) or a
predicate ``path -> bool``; the most recently registered matching override wins, and
paths no scoped override matches keep the base handler.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar, overload

from .errors import DuplicateHandlerError, HandlerNotFoundError

K = TypeVar("K", bound=Hashable)
H = TypeVar("H", bound=Callable)

Where = str | Callable[[str], bool] | None


def key_name(key: Hashable) -> str:
    """Readable name of a registry key (a class's qualified name, or ``str(key)``)."""
    if isinstance(key, type):
        return f"{key.__module__}.{key.__qualname__}"
    return str(key)


@dataclass(frozen=True)
class _Scoped(Generic[H]):
    handler: H
    where: Where

    def matches(self, path: str | None) -> bool:
        if self.where is None:
            return True
        if path is None:
            return False
        if isinstance(self.where, str):
            return fnmatch.fnmatchcase(path, self.where)
        return bool(self.where(path))


class Registry(Generic[K, H]):
    """A mapping of keys to handlers with explicit register / override semantics.

    Args:
        kind: what the keys are, for messages (``"module class"``, ``"IR type"``).
    """

    def __init__(self, kind: str = "key") -> None:
        self.kind = kind
        self._base: dict[K, H] = {}
        self._scoped: dict[K, list[_Scoped[H]]] = {}

    # -- registration --------------------------------------------------------------------
    @overload
    def register(self, key: K) -> Callable[[H], H]: ...
    @overload
    def register(self, key: K, handler: H) -> H: ...
    def register(self, key, handler=None):
        """Add the handler of ``key``; usable as ``@registry.register(key)``.

        Raises:
            DuplicateHandlerError: ``key`` already has a handler (use ``register_override``).
        """

        def add(fn: H) -> H:
            if key in self._base:
                raise DuplicateHandlerError(
                    f"{self.kind} {key_name(key)!r} already has a handler",
                    key=key_name(key),
                    hint="use register_override to replace it",
                )
            self._base[key] = fn
            return fn

        return add if handler is None else add(handler)

    @overload
    def register_override(self, key: K, *, where: Where = None) -> Callable[[H], H]: ...
    @overload
    def register_override(self, key: K, handler: H, *, where: Where = None) -> H: ...
    def register_override(self, key, handler=None, *, where=None):
        """Replace the handler of an existing ``key``, everywhere or only where ``where`` matches.

        Args:
            key: a key that already has a handler.
            handler: the new handler (omit to use as a decorator).
            where: ``None`` (every path), a glob over implementation paths, or a predicate.

        Raises:
            HandlerNotFoundError: ``key`` has no handler yet (use ``register``).
        """
        if not (where is None or isinstance(where, str) or callable(where)):
            raise TypeError("where must be None, a glob string or a callable path -> bool")

        def add(fn: H) -> H:
            if key not in self._base:
                raise self._missing(key, verb="override")
            if where is None:
                self._base[key] = fn
                self._scoped.pop(key, None)
            else:
                self._scoped.setdefault(key, []).append(_Scoped(fn, where))
            return fn

        return add if handler is None else add(handler)

    # -- lookup --------------------------------------------------------------------------
    def get(self, key: K, path: str | None = None) -> H:
        """The handler for ``key`` at implementation ``path`` (scoped overrides first).

        Raises:
            HandlerNotFoundError: no handler; the message lists the nearest known keys.
        """
        for scoped in reversed(self._scoped.get(key, ())):
            if scoped.matches(path):
                return scoped.handler
        try:
            return self._base[key]
        except KeyError:
            raise self._missing(key, verb="find") from None
        except TypeError:  # unhashable key
            raise self._missing(key, verb="find") from None

    def _missing(self, key: K, verb: str) -> HandlerNotFoundError:
        names = {key_name(k): k for k in self._base}
        near = difflib.get_close_matches(key_name(key), list(names), n=3, cutoff=0.5)
        if isinstance(key, type):
            near += [n for n, k in names.items() if isinstance(k, type) and k.__name__ == key.__name__][:3]
        hint = f"nearest known: {', '.join(dict.fromkeys(near))}" if near else None
        what = "no handler to override" if verb == "override" else "no handler registered"
        follow = "register it first with register()" if verb == "override" else "register one with register()"
        return HandlerNotFoundError(
            f"{what} for {self.kind} {key_name(key)!r}",
            key=key_name(key),
            hint="; ".join(h for h in (hint, follow) if h),
        )

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._base
        except TypeError:
            return False

    def __iter__(self) -> Iterator[K]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)

    def keys(self) -> list[K]:
        return list(self._base)

    def copy(self) -> Registry[K, H]:
        """An independent registry with the same handlers (registering on it changes only it)."""
        new: Registry[K, H] = Registry(self.kind)
        new._base = dict(self._base)
        new._scoped = {k: list(v) for k, v in self._scoped.items()}
        return new

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} keys)"
