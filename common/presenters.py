"""Presenters: how the IR core shows an IR through tools it does not import.

``print(ir)``, ``ir.summary()``, ``impl.print_readable()`` and ``ir.view(path)`` are methods of the core's
:class:`~common.ir.IR` and :class:`~common.ir.Implementation`, but the text views (:mod:`common.textview`) and the
HTML view (:mod:`common.htmlview`) are tools above the core: the core must not import them, not even inside a
function (the layer contract in ``pyproject.toml`` checks it). The methods look up a *presenter* here instead.

The ``common`` package's ``__init__`` (the composition root, which imports both layers) installs the library's
presenters with :func:`install`; Python runs it before any submodule of ``common`` is imported, so the methods always
find them. A presenter is a plain function: ``summary(ir, depth, collapse=...) -> str``,
``graph_text(impl) -> str``, ``view(ir, path, overlay, overlay_name, compare=..., names=...) -> Path``.
:func:`install` refuses unknown names, so a misspelt slot fails where it is installed, not where it is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["SLOTS", "install", "presenter"]

#: The presenter slots the core's methods use.
SLOTS = ("summary", "graph_text", "view")

_installed: dict[str, Callable[..., Any]] = {}


def install(**presenters: Callable[..., Any]) -> None:
    """Install presenters by slot name (a later call replaces a slot's presenter).

    Raises:
        ValueError: a name is not one of :data:`SLOTS`, or a presenter is not callable.
    """
    for name, fn in presenters.items():
        if name not in SLOTS:
            raise ValueError(f"unknown presenter slot {name!r}; the slots are {', '.join(SLOTS)}")
        if not callable(fn):
            raise ValueError(f"the presenter for {name!r} is not callable: {fn!r}")
    _installed.update(presenters)


def presenter(name: str) -> Callable[..., Any]:
    """The presenter installed for ``name``.

    Raises:
        LookupError: none is installed (only when ``common``'s ``__init__`` did not run, e.g. a module loaded by
            file path).
    """
    try:
        return _installed[name]
    except KeyError:
        raise LookupError(f"no presenter {name!r} is installed: import the 'common' package (its __init__ installs "
                          "the text and HTML views)") from None
