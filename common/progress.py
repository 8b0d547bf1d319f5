"""A tiny, dependency-free progress bar for the command-line tools.

The bar is drawn on a terminal only: when the stream is not a TTY (a pipe, a file, a test's
captured ``stderr``) or when ``enabled=False`` (``--quiet``), nothing at all is written. Work is
counted in *stages* (``build model``, ``export``, ``save``, ...), not in nodes or tensors, so the
converters need no callback: the caller wraps each stage::

    with Progress(total=3, label="convert") as bar:
        with bar.stage("build model"):
            model = factory()
        with bar.stage("export + convert"):
            ir = torch2ir.convert(model, args)
        with bar.stage("save"):
            ir.save(path)

While a stage runs, a background thread redraws the bar a few times a second so the elapsed time
keeps moving during a long export; the thread exists only while a bar is drawn.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

__all__ = ["Progress", "is_terminal"]

_SPINNER = "|/-\\"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an interactive terminal (``isatty()``, and ``TERM`` is not ``dumb``).

    Args:
        stream: a text stream such as ``sys.stderr``.

    Returns:
        ``True`` when a progress bar may be drawn on it.
    """
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


class Progress:
    """A one-line progress bar over ``total`` stages, drawn on ``stream`` when it is a terminal.

    Args:
        total: number of stages (or steps) the work has.
        label: a short name shown before the bar (``"demo"``, ``"convert"``).
        stream: where to draw (default ``sys.stderr``).
        enabled: ``False`` never draws (``--quiet``); otherwise the bar is drawn only when ``stream``
            is a terminal (see :func:`is_terminal`).
        width: width of the bar in characters.
        interval: seconds between redraws of the ticking thread (``0`` disables the thread).
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        *,
        stream: TextIO | None = None,
        enabled: bool | None = None,
        width: int = 24,
        interval: float = 0.2,
    ) -> None:
        self.total = max(int(total), 1)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.active = enabled is not False and is_terminal(self.stream)
        self.width = width
        self.interval = interval
        self.done = 0
        self.current = ""
        self._start = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0
        self._last_len = 0

    # -- drawing -----------------------------------------------------------------------------
    def render(self) -> str:
        """The text of the bar as it would be drawn now (without the carriage return)."""
        filled = round(self.width * min(self.done, self.total) / self.total)
        bar = "#" * filled + "." * (self.width - filled)
        spin = _SPINNER[self._ticks % len(_SPINNER)] if self.current else " "
        head = f"{self.label} " if self.label else ""
        stage = f" {spin} {self.current}" if self.current else ""
        return f"{head}[{bar}] {self.done}/{self.total}{stage} {time.perf_counter() - self._start:.1f}s"

    def _draw(self) -> None:
        if not self.active:
            return
        with self._lock:
            text = self.render()
            pad = " " * max(self._last_len - len(text), 0)
            self._last_len = len(text)
            self.stream.write("\r" + text + pad)
            self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self._ticks += 1
            self._draw()

    # -- counting ----------------------------------------------------------------------------
    def update(self, n: int = 1, current: str | None = None) -> None:
        """Count ``n`` more stages done and optionally name the one now running.

        Args:
            n: stages finished since the last call.
            current: what runs now (``""`` clears it; ``None`` leaves it).
        """
        self.done += n
        if current is not None:
            self.current = current
        self._draw()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Show ``name`` as running for the ``with`` block, then count it done (also when it raises).

        Args:
            name: what the stage does (``"export + convert"``).
        """
        self.current = name
        self._draw()
        try:
            yield
        finally:
            self.current = ""
            self.update(1)

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> Progress:
        if self.active:
            self._draw()
            if self.interval > 0:
                self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop redrawing and erase the bar, leaving the terminal line empty for what follows."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.active:
            with self._lock:
                self.stream.write("\r" + " " * self._last_len + "\r")
                self.stream.flush()
            self.active = False
