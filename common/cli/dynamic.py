"""``--dynamic [INPUT.]DIM=NAME,...``: the input dimensions a conversion keeps symbolic.

Without it, ``torch2ir convert`` and ``lower`` trace the example inputs' shapes exactly and the rebuilt model's input
guard refuses any other shape. ``--dynamic 0=batch,1=seq`` makes dimension 0 of every tensor input that has one
symbolic, and dimension 1; ``--dynamic input_ids.1=seq`` one input's (a keyword input's name, or a positional
input's index). Each is ``torch.export.Dim.DYNAMIC``: export finds the range the model allows (a BERT's sequence
length up to its position table) and which dimensions must be equal, and names the symbols itself (``s0``,
``s1``, ...); ``NAME`` labels the dimension for the reader and in errors. ``torch.export`` refuses a dimension the
model fixes (a size-1 example dimension, a dimension the code specialises); the error says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .app import CommandError

__all__ = ["DYNAMIC_HELP", "dynamic_shapes", "parse_dynamic"]

DYNAMIC_HELP = ("input dimensions to keep symbolic (torch.export.Dim.DYNAMIC): DIM=NAME applies to every tensor "
                "input that has dimension DIM, INPUT.DIM=NAME to one input (its keyword name or positional index); "
                "NAME is a label; comma-separated or repeated, e.g. --dynamic 0=batch,1=seq")

_ITEM = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*|\d+)\.)?(\d+)=([A-Za-z_][A-Za-z0-9_]*)$")


def parse_dynamic(values: list[str]) -> list[tuple[str | None, int, str]]:
    """``[(input or None, dim, name), ...]`` of the ``--dynamic`` values.

    Raises:
        CommandError: an item is not ``[INPUT.]DIM=NAME``.
    """
    out: list[tuple[str | None, int, str]] = []
    for value in values:
        for item in filter(None, (part.strip() for part in value.split(","))):
            match = _ITEM.match(item)
            if match is None:
                raise CommandError(f"--dynamic item {item!r} is not [INPUT.]DIM=NAME", hint=DYNAMIC_HELP)
            out.append((match.group(1), int(match.group(2)), match.group(3)))
    return out


def dynamic_shapes(model: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                   items: list[tuple[str | None, int, str]]) -> Any:
    """The ``dynamic_shapes`` argument of ``torch.export`` for ``items`` (``None`` when there are none).

    Raises:
        CommandError: an item names an input that does not exist or is no tensor, or a dimension an input lacks.
    """
    if not items:
        return None
    inputs: dict[str, Any] = {str(i): a for i, a in enumerate(args)} | dict(kwargs)
    dims: dict[str, Any] = {}
    per_input: dict[str, dict[int, Any]] = {}
    tensors = [k for k, v in inputs.items() if isinstance(v, torch.Tensor)]
    for target, dim, name in items:
        if target is not None and target not in tensors:
            raise CommandError(f"--dynamic names input {target!r}, which is no tensor input of this call",
                               hint=f"the tensor inputs are {', '.join(tensors)}")
        chosen = [target] if target is not None else tensors
        matched = False
        for key in chosen:
            tensor = inputs[key]
            if dim < tensor.dim():
                per_input.setdefault(key, {})[dim] = dims.setdefault(name, torch.export.Dim.DYNAMIC)
                matched = True
            elif target is not None:
                raise CommandError(f"--dynamic {target}.{dim}={name}: input {target!r} has {tensor.dim()} dimensions")
        if not matched:
            raise CommandError(f"--dynamic {dim}={name}: no tensor input has dimension {dim}")
    shapes = torch.export.ShapesCollection()
    for key, spec in per_input.items():
        shapes[inputs[key]] = spec
    return shapes.dynamic_shapes(model, args, dict(kwargs))
