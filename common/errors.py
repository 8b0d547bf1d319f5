"""Exception hierarchy of torch2ir / ir2torch.

Every error the library raises on bad input is a subclass of :class:`IRError`.
Each carries the place it is about (``implementation``, ``node``, ``key``) and a
``hint`` saying what to do, and renders them into one readable message::

    IRError: implementation 'encoder.layer.0', node 'add_3': edge from 'x' fills
    argument slot [1], which is not a reference in the node's args.
    Hint: make the node's args hold {'$ref': 'x'} at [1], or drop the edge's slot.
"""

from __future__ import annotations

import re
from typing import Any

_TENSOR_REPR = re.compile(r"\btensor\(")
_CLOSING = {"(": ")", "[": "]", "{": "}"}


#: An error listing keys, nodes or problems shows this many, then how many more.
SHOWN = 12


def listing(lines: list[str], shown: int = SHOWN, sep: str = "\n  ") -> str:
    """The first ``shown`` of ``lines`` joined by ``sep``, then ``... and N more`` (a state dict of 510 mismatching
    keys is one readable error, not 510 lines)."""
    text = sep.join(lines[:shown])
    if len(lines) > shown:
        text += f"{sep}... and {len(lines) - shown} more"
    return text


def without_values(text: str) -> str:
    """``text`` with each printed tensor (``tensor([[0.1, ...]], grad_fn=...)``) shortened to ``tensor(...)``.

    Messages quote other errors and values (an exception of a rebuilt graph, a mismatching argument); a tensor's
    values are data, never what an error is about, and a model's inputs or weights should not end up in logs.
    Every :class:`IRError` message and hint goes through this.
    """
    if "tensor(" not in text:
        return text
    out: list[str] = []
    position = 0
    for match in _TENSOR_REPR.finditer(text):
        if match.start() < position:
            continue
        out.append(text[position:match.start()] + "tensor(...)")
        stack = ["("]
        index = match.end()
        while index < len(text) and stack:
            char = text[index]
            if char in _CLOSING:
                stack.append(char)
            elif stack and char == _CLOSING[stack[-1]]:
                stack.pop()
            index += 1
        position = index  # past the closing parenthesis, or the end of a cut text
    out.append(text[position:])
    return "".join(out)


class IRError(Exception):
    """Base class of every error about an IR, a model or a state dict.

    Args:
        message: what is wrong.
        implementation: key of the implementation concerned, if any.
        node: name of the node concerned, if any.
        key: another key concerned (a state-dict key, a document path, ...).
        hint: what the user should do about it.
    """

    def __init__(
        self,
        message: str,
        *,
        implementation: str | None = None,
        node: str | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = without_values(message)
        self.implementation = implementation
        self.node = node
        self.key = key
        self.hint = without_values(hint) if hint else hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.implementation is not None:
            where.append(f"implementation {self.implementation!r}")
        if self.node is not None:
            where.append(f"node {self.node!r}")
        if self.key is not None:
            where.append(f"at {self.key}")
        text = (", ".join(where) + ": " if where else "") + self.message
        if self.hint:
            text += f"\nHint: {self.hint}"
        return text

    def __str__(self) -> str:  # KeyError subclasses would otherwise repr() the message
        return self._render()

    def __reduce__(self) -> tuple[Any, ...]:  # keep errors picklable for pytest-xdist & co.
        return (
            _rebuild_error,
            (type(self), self.message, self.implementation, self.node, self.key, self.hint),
        )


def _rebuild_error(cls: type[IRError], message: str, implementation, node, key, hint) -> IRError:
    return cls(message, implementation=implementation, node=node, key=key, hint=hint)


# -- documents and files ---------------------------------------------------------------
class IRFormatError(IRError):
    """A document (dict or JSON file) does not follow the IR schema."""


class UnsupportedFormatVersionError(IRFormatError):
    """A JSON file was written by a newer (or unknown) version of the format."""


class UnsafeNameError(IRFormatError):
    """A name in a file is not of the form its field requires (it could shadow an attribute or reach
    generated code); see :mod:`common.names`."""


class IRSerializationError(IRError):
    """A value in the IR cannot be written to JSON (a tensor, an arbitrary object, ...)."""


# -- graph lints -------------------------------------------------------------------------
class IRValidationError(IRError):
    """An IR is well-formed as a document but its graphs are inconsistent."""


class DanglingEdgeError(IRValidationError):
    """An edge names a node that does not exist."""


class CycleError(IRValidationError):
    """A graph (or the hierarchy of implementations) contains a cycle."""


class MissingImplementationError(IRValidationError):
    """A node calls an implementation key that the IR does not contain."""


class ImplementationNotFound(MissingImplementationError, KeyError):
    """``ir[key]`` for a key the IR does not hold."""

    def __init__(self, key: Any, known: list[str]) -> None:
        import difflib

        near = difflib.get_close_matches(str(key), known, n=3)
        super().__init__(
            f"the IR has no implementation {key!r}",
            hint=f"nearest keys: {', '.join(near)}" if near else "see list(ir) for the keys it holds",
        )


class UnknownNodeKindError(IRValidationError):
    """A node's ``type`` is neither a node kind nor the type of an implementation."""


class NodeTypeMismatchError(IRValidationError):
    """A module-call node's ``type`` differs from the type of the implementation it calls."""


class ArgumentMismatchError(IRValidationError):
    """A node's ``args``/``kwargs`` and its incoming edges disagree."""


class UnsafeTargetError(IRValidationError):
    """A function node names a callable outside the allow-list of ``common.safety``."""


class OperatorSurfaceError(UnsafeTargetError):
    """A file names an ATen operator outside the default operator surface (``common/default_ops.txt``): the
    operator is classified safe to name but no real model's conversion emits it; ``allow=['aten::<op>']`` opts in."""


# -- registries --------------------------------------------------------------------------
class RegistryError(IRError):
    """Misuse of a handler registry."""


class DuplicateHandlerError(RegistryError):
    """``register`` was called for a key that already has a handler."""


class HandlerNotFoundError(RegistryError, LookupError):
    """No handler is registered for a key (also raised by ``register_override``)."""


# -- conversion and state ---------------------------------------------------------------
class ConversionError(IRError):
    """A model cannot be converted; lists every unsupported construct found."""


class StateDictError(IRError):
    """A state dict does not fit the rebuilt model (missing, unexpected or mis-shaped keys)."""


class BuildError(IRError):
    """A module cannot be built from an implementation (its builder refused the IR's attributes)."""


class ExecutionError(IRError):
    """A rebuilt graph failed while running: names the implementation and node; the cause is chained.

    The error raised is also an instance of the original exception's class where Python allows it
    (``except ValueError`` around a rebuilt model catches what it caught around the original).
    """


class ResourceBudgetError(IRError):
    """Rebuilding would allocate more memory than the budget allows (nothing was allocated)."""


class InputMismatchError(IRError):
    """A rebuilt model or executed FlatIR was called with inputs that differ from those it was converted for
    (shape, dtype, a dynamic size out of its range, pytree structure); ``key`` names the input."""


__all__ = [
    "SHOWN",
    "listing",
    "ArgumentMismatchError",
    "BuildError",
    "ConversionError",
    "CycleError",
    "DanglingEdgeError",
    "DuplicateHandlerError",
    "ExecutionError",
    "HandlerNotFoundError",
    "IRError",
    "ImplementationNotFound",
    "IRFormatError",
    "IRSerializationError",
    "IRValidationError",
    "InputMismatchError",
    "MissingImplementationError",
    "NodeTypeMismatchError",
    "RegistryError",
    "ResourceBudgetError",
    "StateDictError",
    "UnknownNodeKindError",
    "UnsafeNameError",
    "OperatorSurfaceError",
    "UnsafeTargetError",
    "UnsupportedFormatVersionError",
    "without_values",
]
