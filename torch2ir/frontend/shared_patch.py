"""A process-wide patch that only the threads inside it act on, installed while one of them is.

The conversion's frontends replace a function or a method of another library for the length of an export
(transformers' mask decision and eager experts loops, brevitas' branches, the custom autograd Functions'
``forward``). The replacement lives in the other library's module or class, so it is seen by every thread; each
replacement therefore asks :meth:`SharedPatch.inside` and runs the original in any thread that is not converting.
:class:`SharedPatch` holds what they share: the patch is installed when the first thread enters, undone when the
last one leaves (blocks nest and threads overlap), and each thread knows whether it is inside.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


class SharedPatch:
    """``install(*args)`` applies the patch and returns the function that undoes it; :meth:`entered` calls it when
    no thread is inside and the undo when the last one leaves."""

    def __init__(self, install: Callable[..., Callable[[], None]]) -> None:
        self._install = install
        self._lock = threading.Lock()
        self._local = threading.local()
        self._count = 0
        self._undo: Callable[[], None] | None = None

    def inside(self) -> bool:
        """Whether this thread is inside an :meth:`entered` block."""
        return getattr(self._local, "depth", 0) > 0

    @property
    def installed(self) -> bool:
        """Whether the patch is in place (some thread is inside)."""
        return self._count > 0

    @contextlib.contextmanager
    def entered(self, *args: Any) -> Iterator[None]:
        """Within the block this thread is inside and the patch is in place (installed with ``args`` when no
        other block was open)."""
        with self._lock:
            if self._count == 0:
                self._undo = self._install(*args)
            self._count += 1
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1
            with self._lock:
                self._count -= 1
                if self._count == 0:
                    undo, self._undo = self._undo, None
                    if undo is not None:
                        undo()


__all__ = ["SharedPatch"]
