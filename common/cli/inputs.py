"""Example inputs from the command line: ``--input [NAME=]SHAPE[:DTYPE[:LOW..HIGH]]`` and ``--kwargs JSON``.

- ``2x3x32x32`` is a float32 tensor of that shape drawn from a standard normal distribution;
- ``2x8:int64`` draws integers from ``[0, --vocab)`` (token ids); ``2x8:int64:0..2`` from ``[0, 2)``;
  ``2x8:float32:-1..1`` draws uniformly; ``2x8:bool`` draws ``True``/``False``;
- ``scalar`` (or an empty shape) is a 0-d tensor;
- ``attention_mask=2x8:int64:1..2`` makes a keyword input (here all ones); the others are positional,
  in the order given;
- ``--kwargs '{"return_dict": false}'`` adds keyword inputs that are not tensors.

Inputs are drawn from a generator seeded with ``--seed``, so two commands with the same options get
the same tensors. With ``--meta`` they are empty tensors on the ``meta`` device.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import IRFormatError
from ..values import dtype_from_name
from .app import CommandError

__all__ = ["InputSpec", "make_inputs", "parse_input", "parse_json_option"]

_SYNTAX_HINT = "write [NAME=]SHAPE[:DTYPE[:LOW..HIGH]], e.g. 2x3x32x32, 2x8:int64 or attention_mask=2x8:int64:0..2"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMON_DTYPES = "float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool"


@dataclass(frozen=True)
class InputSpec:
    """One ``--input``: a keyword ``name`` (``None``: positional), ``shape``, ``dtype`` and optional value range."""

    name: str | None
    shape: tuple[int, ...]
    dtype: torch.dtype
    low: float | None = None
    high: float | None = None


def _bad(text: str, why: str) -> CommandError:
    return CommandError(f"cannot read --input {text!r}: {why}", hint=_SYNTAX_HINT)


def parse_input(text: str) -> InputSpec:
    """Parse one ``--input`` value.

    Args:
        text: ``[NAME=]SHAPE[:DTYPE[:LOW..HIGH]]``.

    Returns:
        The parsed spec.

    Raises:
        CommandError: the text does not follow the syntax (names what is wrong).
    """
    name, body = (text.split("=", 1) if "=" in text else (None, text))
    if name is not None and not _NAME.match(name):
        raise _bad(text, f"{name!r} is not a keyword name")
    parts = body.split(":")
    if len(parts) > 3:
        raise _bad(text, "too many ':' separated fields")
    shape_text = parts[0].strip()
    if shape_text in ("", "scalar"):
        shape: tuple[int, ...] = ()
    else:
        dims = shape_text.lower().split("x")
        if not all(d.isdigit() for d in dims):
            raise _bad(text, f"shape {shape_text!r} is not sizes joined by 'x'")
        shape = tuple(int(d) for d in dims)
    dtype = torch.float32
    if len(parts) > 1:
        try:
            dtype = dtype_from_name(parts[1].strip())
        except IRFormatError:
            raise CommandError(f"cannot read --input {text!r}: unknown dtype {parts[1]!r}",
                               hint=f"use one of {_COMMON_DTYPES}") from None
    low = high = None
    if len(parts) > 2:
        bounds = parts[2].split("..")
        try:
            low, high = (float(b) for b in bounds) if len(bounds) == 2 else (None, None)
        except ValueError:
            low = high = None
        if low is None or high is None or not low < high:
            raise _bad(text, f"range {parts[2]!r} is not LOW..HIGH with LOW < HIGH")
        if not (dtype.is_floating_point or dtype.is_complex) and not (low.is_integer() and high.is_integer()):
            raise _bad(text, f"range {parts[2]!r} of an integer input must have integer bounds")
    return InputSpec(name, shape, dtype, low, high)


def make_inputs(
    specs: list[InputSpec], *, seed: int = 0, vocab: int = 100, meta: bool = False, extra: dict[str, Any] | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The tensors of ``specs`` as ``(args, kwargs)``.

    Args:
        specs: parsed ``--input`` values, in order.
        seed: seed of the generator all values are drawn from.
        vocab: integers without a range are drawn from ``[0, vocab)``.
        meta: make empty tensors on the ``meta`` device instead of values.
        extra: keyword inputs that are not tensors (``--kwargs``), added to ``kwargs``.

    Returns:
        Positional and keyword inputs.

    Raises:
        CommandError: a keyword input is given twice.
    """
    gen = torch.Generator().manual_seed(seed)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for spec in specs:
        value = _tensor(spec, gen, vocab, meta)
        if spec.name is None:
            args.append(value)
        elif spec.name in kwargs:
            raise CommandError(f"keyword input {spec.name!r} is given twice", hint="give each --input NAME= once")
        else:
            kwargs[spec.name] = value
    for key, value in (extra or {}).items():
        if key in kwargs:
            raise CommandError(f"keyword input {key!r} is given by --input and by --kwargs", hint="give it once")
        kwargs[key] = value
    return tuple(args), kwargs


def _tensor(spec: InputSpec, gen: torch.Generator, vocab: int, meta: bool) -> torch.Tensor:
    if meta:
        return torch.empty(spec.shape, dtype=spec.dtype, device="meta")
    if spec.dtype == torch.bool:
        return torch.randint(0, 2, spec.shape, generator=gen).bool()
    if spec.dtype.is_floating_point or spec.dtype.is_complex:
        if spec.low is None or spec.high is None:
            return torch.randn(spec.shape, generator=gen).to(spec.dtype)
        return (torch.rand(spec.shape, generator=gen) * (spec.high - spec.low) + spec.low).to(spec.dtype)
    low = int(spec.low) if spec.low is not None else 0
    high = int(spec.high) if spec.high is not None else vocab
    return torch.randint(low, high, spec.shape, generator=gen).to(spec.dtype)


def parse_json_option(text: str | None, option: str) -> dict[str, Any]:
    """The JSON object given to ``option`` (``'{"a": 1}'``, or ``@file.json`` to read it from a file).

    Args:
        text: the option's value (``None``: not given).
        option: the option's name, for messages (``"--config"``).

    Returns:
        The object (``{}`` when not given).

    Raises:
        CommandError: the text (or file) is not a JSON object.
    """
    if text is None:
        return {}
    source = option
    if text.startswith("@"):
        path = Path(text[1:])
        source = f"{option} file {os.fspath(path)!r}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CommandError(f"{source} is not valid JSON: {exc}",
                           hint=f"""quote it for the shell: {option} '{{"key": 1}}'""") from None
    if not isinstance(value, dict):
        raise CommandError(f"{source} must be a JSON object, not {type(value).__name__}",
                           hint=f"""e.g. {option} '{{"key": 1}}'""")
    return value
