"""Keep torch's internal log output (fake-tensor tracebacks, symbolic-shape warnings that print the whole
traced graph) off stderr while torch2ir traces a model.

A failed trace that torch2ir handles itself (the train-mode export that falls back, a leaf signature that
cannot be preserved) makes torch log hundreds of lines that say nothing to the user. While
:func:`torch_logs_to_debug` is active, every record of the ``torch`` loggers goes to the logger
``torch2ir.torch`` at DEBUG instead: invisible by default, shown by ``--debug`` on the command line or by
``logging.getLogger("torch2ir").setLevel(logging.DEBUG)`` with a handler. torch.export also prints the
partial graph of a failed trace straight to ``sys.stderr``; what is written there inside the block goes
to the same logger. Errors torch2ir raises are unaffected.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator

__all__ = ["LOGGER", "torch_logs_to_debug"]

#: where torch's own records go while a model is traced
LOGGER = logging.getLogger("torch2ir.torch")


class _ToDebug(logging.Handler):
    """Re-emits a torch record on :data:`LOGGER` at DEBUG, naming its logger and level."""

    def emit(self, record: logging.LogRecord) -> None:
        if LOGGER.isEnabledFor(logging.DEBUG) and not record.name.startswith("torch.__trace"):
            LOGGER.debug("[%s %s] %s", record.name, record.levelname, record.getMessage())


def _torch_loggers() -> list[logging.Logger]:
    names = [n for n in logging.root.manager.loggerDict
             if (n == "torch" or n.startswith("torch.")) and not n.startswith("torch.__trace")]  # structured trace
    found = [logging.getLogger(n) for n in names]
    return [lg for lg in found if any(_is_stream(h) for h in lg.handlers)]


def _is_stream(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


@contextlib.contextmanager
def torch_logs_to_debug() -> Iterator[None]:
    """Within the block, torch's loggers, and text written to ``sys.stderr``, go to :data:`LOGGER` at DEBUG.

    Nested uses are harmless; handlers and ``sys.stderr`` are put back on exit, even when the block raises.
    """
    forward = _ToDebug()
    swapped: list[tuple[logging.Logger, list[logging.Handler]]] = []
    for lg in _torch_loggers():
        swapped.append((lg, lg.handlers[:]))
        lg.handlers = [h for h in lg.handlers if not _is_stream(h)] + [forward]
    stderr, captured = sys.stderr, io.StringIO()
    sys.stderr = captured
    try:
        yield
    finally:
        sys.stderr = stderr
        for lg, handlers in swapped:
            lg.handlers = handlers
        if captured.getvalue().strip():
            LOGGER.debug("[stderr] %s", captured.getvalue().rstrip())
