"""Running a command: argument parsing, exit codes, one-line errors, ``--debug`` and ``--quiet``.

Exit codes of both tools:

- ``0``: done (and, for checks, the condition holds);
- ``1``: the check failed: ``verify`` found a difference (or the rebuilt model raised where the original
  ran: a :class:`CheckFailedError`, one line ``ir2torch: failed: ...`` on ``stderr``), ``diff`` found
  the files differ;
- ``2``: usage or input error: bad options, a missing or malformed file, an unknown model factory,
  a shape that does not parse, any :class:`~common.errors.IRError`, and any other exception (a file
  is untrusted data: whatever a library raises on it is a bad input). One line goes to ``stderr``
  (``torch2ir: error: ...``, with the hint), without a traceback unless ``--debug`` is given;
- ``141`` (128 + SIGPIPE, as for any Unix tool): the reader of ``stdout`` went away
  (``ir2torch show big.flat.json | head``); nothing more is written, and no error.

``--debug`` also shows, on ``stderr``, what torch logs while a model is traced (the logger ``torch2ir``
at DEBUG; see :mod:`torch2ir.frontend.logs`), which is kept out of sight otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from ..errors import IRError

__all__ = [
    "EXIT_BROKEN_PIPE", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "CheckFailedError", "CommandError", "Parser",
    "add_allow_op", "add_common_options",
    "drop_script_folder", "first_line", "one_line", "run",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: the exit code of a command whose ``stdout`` reader closed the pipe (128 + SIGPIPE)
EXIT_BROKEN_PIPE = 141


class CommandError(IRError):
    """A usage or input error of a command (bad option value, missing file, unknown factory): exit code 2."""


class CheckFailedError(CommandError):
    """The check a command makes failed without a report to print (``verify``: the rebuilt model raised): exit 1."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are :class:`CommandError` s (one line, exit code 2), not usage dumps.

    Options are never abbreviated (``--stat`` is not ``--state``: a typo must not pick an option), and an unknown
    option is answered with the closest known one and the help of the command that has it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._command: str | None = None  # the command the last parse chose (for the did-you-mean)

    def error(self, message: str) -> NoReturn:
        """Raise the parse error instead of printing the usage and exiting.

        Raises:
            CommandError: always.
        """
        hint = f"see {self.prog} --help"
        if message.startswith("unrecognized arguments:"):
            options = self._known_options(self._command)
            for arg in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(arg.split("=", 1)[0], list(options), n=1, cutoff=0.7) \
                    if arg.startswith("--") else []
                if close:
                    message = f"{message} (did you mean {close[0]}?)"
                    hint = f"see {options[close[0]]} --help"
                    break
        raise CommandError(message, hint=hint)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """argparse's, after refusing a long option no command knows: named first, with the closest one (argparse
        would first complain about a required option the typo was meant to give, ``--ouput`` for ``--output``)."""
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if args is not None and commands:
            chosen = next((a for a in args if isinstance(a, str) and a in commands[0].choices), None)
            known = self._known_options(chosen)
            self._command = chosen
            for arg in args:
                if arg == "--":
                    break
                if isinstance(arg, str) and arg.startswith("--") and arg.split("=", 1)[0] not in known:
                    self.error(f"unrecognized arguments: {arg}")
        return super().parse_known_args(args, namespace)

    def _known_options(self, command: str | None = None) -> dict[str, str]:
        """Every long option of this parser and of its commands (only ``command``'s when given) -> the ``prog`` of
        the parser that has it."""
        found: dict[str, str] = {}
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if command is not None and name != command:
                        continue
                    for opt in (o for a in sub._actions for o in a.option_strings if o.startswith("--")):
                        found.setdefault(opt, sub.prog)
            for opt in (o for o in action.option_strings if o.startswith("--")):
                found.setdefault(opt, self.prog)
        return found


def add_common_options(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """Add ``--debug`` and ``--quiet`` (accepted before and after the command name), and ``--version`` (top only).

    Args:
        parser: the top-level parser or a command's parser.
        top: ``True`` for the top-level parser (sets the defaults); command parsers leave unset
            options alone so a flag given before the command name is kept.
    """
    default: Any = False if top else argparse.SUPPRESS
    if top:
        from .. import __version__

        parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                            help="print the version and exit")
    parser.add_argument("--debug", action="store_true", default=default,
                        help="show the full traceback of an error")
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="no progress bar (it is shown only on a terminal anyway)")


def first_line(exc: BaseException) -> str:
    """``Type: first non-empty line of the message`` of any exception (``Type`` alone for an empty message)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: the hint appended as ``(hint: ...)``.

    Args:
        exc: any exception. :class:`IRError` s keep their place (implementation, node, key), the lines of
            their message joined, and their hint; any other exception gives its class and the first line of
            its message (a library's message can run over many lines).

    Returns:
        A single line of text.
    """
    if isinstance(exc, IRError):
        where = [f"implementation {exc.implementation!r}"] if exc.implementation is not None else []
        where += [f"node {exc.node!r}"] if exc.node is not None else []
        where += [f"at {exc.key}"] if exc.key is not None and exc.key not in exc.message else []
        text, hint = (", ".join(where) + ": " if where else "") + exc.message, exc.hint
    else:
        text, hint = first_line(exc), "run with --debug for the traceback"
    parts = [p.strip() for p in text.splitlines() if p.strip()]
    line = ""
    for part in parts:
        line = part if not line else f"{line} {part}" if line.endswith(":") else f"{line}; {part}"
    return f"{line} (hint: {hint})" if hint else line


def run(prog: str, parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run the chosen command (``options.func(options)``), mapping errors to exit codes.

    Args:
        prog: the program name used in error lines.
        parser: the top-level parser; every command sets ``func`` with ``set_defaults``.
        argv: the arguments (``None``: ``sys.argv[1:]``).

    Returns:
        The exit code: the command's own (0 or 1), 1 for :class:`CheckFailedError`, 2 for any other error,
        130 when interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # known before parsing, so parse errors can show their traceback too
    try:
        options = parser.parse_args(argv)
        command: Callable[[argparse.Namespace], int] = options.func
        with _debug_logging(debug):
            code = int(command(options))
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every error becomes one line and exit code 2 (CheckFailedError: 1)
        if debug:
            traceback.print_exc()
        failed = isinstance(exc, CheckFailedError)
        print(f"{prog}: {'failed' if failed else 'error'}: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED if failed else EXIT_USAGE


def _silence_stdout() -> None:
    """Point ``stdout`` at ``/dev/null`` after its reader went away, so the interpreter's final flush of what is
    still buffered does not raise a second ``BrokenPipeError`` ("Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (a test's capture): nothing to flush
        pass


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (a test may replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


@contextlib.contextmanager
def _debug_logging(enabled: bool) -> Iterator[None]:
    """With ``enabled``, show the ``torch2ir`` loggers' DEBUG records (torch's own output while tracing) on
    ``stderr`` for the duration of the command."""
    if not enabled:
        yield
        return
    logger = logging.getLogger("torch2ir")
    level, handler = logger.level, _StderrHandler()
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def drop_script_folder() -> None:
    """Take back the current folder that ``python -m`` put first on ``sys.path`` (``python -m torch2ir``).

    The installed ``torch2ir`` / ``ir2torch`` commands never search the current folder for ``MODEL``;
    this makes ``python -m`` behave the same, so a ``json.py`` or ``transformers.py`` lying there is
    not imported by a later import. Only the entry Python added is removed: not under ``python -P``,
    and a ``PYTHONPATH`` entry naming the folder stays. ``--import-path .`` adds it back on purpose.
    Modules Python imported before this runs are not undone: for a folder you do not trust, use the
    installed command or ``python -P -m``.
    """
    if not getattr(sys.flags, "safe_path", False) and sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]


def add_allow_op(parser: argparse.ArgumentParser) -> None:
    """``--allow-op NAMESPACE::OP`` / ``NAMESPACE::*`` (repeatable): operators of other namespaces to accept."""
    parser.add_argument("--allow-op", dest="allow_op", action="append", default=[], metavar="NS::OP",
                        help="accept the operator NS::OP (or every operator of NS with NS::*) besides the default "
                        "allow-list; it must be registered by a library already imported (repeatable); "
                        "aten::OP[.OVERLOAD] accepts an ATen operator outside the default surface; a module "
                        "class PKG.MOD.CLASS allows rebuilding opaque leaves of that class (imports PKG.MOD)")
