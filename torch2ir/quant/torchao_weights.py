"""torchao's quantized weights (``torchao.quantization.quantize_``): carried as the weights of handled ``Linear``
leaves.

``quantize_`` keeps a model's ``nn.Linear`` modules and replaces each weight with a tensor subclass
(``Int8Tensor``, ``Float8Tensor``, ``IntxUnpackedToInt8Tensor``) whose ``F.linear`` runs torchao's kernels.
torch.export would trace through the subclass (``export.access_subclass_inner_tensor`` and torchao's operators
in the graph), so:

- every such weight must belong to a module the converter keeps as a handled leaf of type ``linear`` (an
  ``nn.Linear``): anything else, or a subclass :mod:`common.torchao_tensors` does not carry, is refused before
  tracing, naming the parameter (:func:`check_weights`);
- while the model is converted, each weight is stood in for by a plain float parameter of its shape and dtype
  (:func:`torchao_stand_ins`; the leaf's own ops are not in the IR, and its rebuild runs the real weight);
- the weight's state record names its class (``"subclass"``), so that a rebuild takes a weight of that class
  only (:func:`common.state_dict.record_mismatch`) and puts it in place as it is;
- the capture is not the model's computation: ``ir.lower()`` refuses it, naming the weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from common.errors import ConversionError, StateDictError
from common.torchao_tensors import CLASSES, class_name, to_stored

#: The IR type of the leaves that may hold a torchao weight.
LEAF_TYPES = ("linear",)


def torchao_weights(model: nn.Module) -> list[tuple[str, str, torch.Tensor]]:
    """``(module path, parameter or buffer name, tensor)`` of every torchao tensor subclass held by ``model``."""
    out = []
    for path, module in model.named_modules():
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None and class_name(tensor) is not None:
                out.append((path, name, tensor))
    return out


def check_weights(weights: list[tuple[str, str, torch.Tensor]], model: nn.Module, table: Any) -> None:
    """Refuse torchao tensors the IR cannot carry.

    Raises:
        ConversionError: naming every tensor that is not the ``weight`` parameter of a handled ``nn.Linear`` leaf
            (outside any other handled leaf),
            is of a class outside :data:`common.torchao_tensors.CLASSES`, or has attributes its record cannot hold.
    """
    problems: list[str] = []
    first: str | None = None  # the first refused tensor
    outermost = set(table.outermost_leaves())  # a leaf inside another handled leaf is that leaf's business
    for path, name, tensor in weights:
        count = len(problems)
        module = model.get_submodule(path)
        where = f"{path + '.' if path else ''}{name}"
        cls = class_name(tensor)
        if cls not in CLASSES:
            problems.append(f"{where} is a {cls}, not one of {', '.join(CLASSES)}")
        elif name != "weight" or tensor is not module._parameters.get(name) or path not in outermost or \
                table.leaf_type(module) not in LEAF_TYPES:
            problems.append(f"{where} ({cls}) is not the weight of an nn.Linear kept as a handled leaf "
                            f"(its module is a {type(module).__name__})")
        else:
            try:
                to_stored(where, tensor, source="converting")
            except StateDictError as exc:
                problems.append(exc.message)
        if first is None and len(problems) > count:
            first = where
    if problems:
        raise ConversionError(
            f"{len(problems)} torchao tensor{'s' if len(problems) != 1 else ''} the IR cannot carry: "
            + "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else ""),
            key=first,
            hint="quantize_ only nn.Linear modules (its default filter) with Int8WeightOnlyConfig, "
            "Int8DynamicActivationInt8WeightConfig, Float8WeightOnlyConfig, IntxWeightOnlyConfig or "
            "Int8DynamicActivationIntxWeightConfig (docs/extending.md), or convert the float model and quantize_ "
            "the rebuild")


class StoodIn:
    """The torchao weights stood in for while converting: ``{(module path, name): qualified class}``."""

    def __init__(self) -> None:
        self.weights: dict[tuple[str, str], str] = {}

    def why(self) -> str:
        """Why a capture with these stand-ins cannot be lowered."""
        named = ", ".join(f"{p}.{n}" if p else n for p, n in list(self.weights)[:3])
        classes = ", ".join(sorted(set(self.weights.values())))
        return (f"torchao weights ({named}{', ...' if len(self.weights) > 3 else ''}: {classes}) are traced as "
                "float stand-ins (their kernels are torchao's, which a FlatIR does not carry)")

    def refuse_lowering(self, captures: list[Any]) -> None:
        """Mark ``captures`` (a lowering's) as not the model's computation."""
        for capture in captures if self.weights else []:
            if capture.refused is None:
                capture.refused = self.why()

    def record(self, ir: Any) -> None:
        """Name each weight's class in its state record (every path the module is reached by), and mark the
        IR's capture as not the model's computation."""
        if not self.weights:
            return
        for (path, name), cls in self.weights.items():
            key = path or "root"
            if key in ir and name in ir[key].state:
                ir[key].state[name]["subclass"] = cls
            for impl in ir.values():  # a module reached by two paths is recorded at its first one
                if path in impl.aliases and name in impl.state:
                    impl.state[name]["subclass"] = cls
        capture = getattr(ir, "capture", None)
        if capture is not None and capture.refused is None:
            capture.refused = self.why()


@contextlib.contextmanager
def torchao_stand_ins(model: nn.Module, table: Callable[[], Any]) -> Iterator[StoodIn]:
    """While converting ``model``: each torchao weight (checked by :func:`check_weights` with the module table
    ``table()`` makes) is replaced by a plain parameter of its shape and dtype (zeros; one per tensor, so ties stay
    ties), and put back after."""
    stood = StoodIn()
    weights = torchao_weights(model)
    if not weights:
        yield stood
        return
    check_weights(weights, model, table())
    plain: dict[int, nn.Parameter] = {}
    swapped: list[tuple[nn.Module, str, torch.Tensor]] = []
    try:
        for path, name, tensor in weights:
            module = model.get_submodule(path)
            if id(tensor) not in plain:
                plain[id(tensor)] = nn.Parameter(torch.zeros(tensor.shape, dtype=tensor.dtype, device=tensor.device),
                                                 requires_grad=tensor.requires_grad)
            swapped.append((module, name, tensor))
            module._parameters[name] = plain[id(tensor)]
            stood.weights[(path, name)] = class_name(tensor)  # type: ignore[assignment]
        yield stood
    finally:
        for module, name, tensor in swapped:
            module._parameters[name] = tensor


__all__ = ["LEAF_TYPES", "StoodIn", "check_weights", "torchao_stand_ins", "torchao_weights"]
