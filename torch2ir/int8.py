"""Eager int8 modules (what ``torch.ao.quantization.convert`` makes): refused before tracing, naming the module.

Their weights are packed into TorchScript objects (``Conv2dPackedParamsBase``, ``LinearPackedParamsBase``) that
``torch.export`` cannot trace and an IR cannot hold as data; export's own error names neither the module nor a
way out. The IR carries the model *before* ``convert``: prepared or QAT-prepared (float weights, observers and
fake-quantize modules with their statistics), and ``convert`` runs on the rebuilt model.
"""

from __future__ import annotations

from torch import nn

from common.errors import ConversionError

#: Module namespaces of eager int8 modules.
INT8_NAMESPACES = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.", "torch.nn.quantized.",
                   "torch.nn.intrinsic.quantized.")
#: Float modules living in those namespaces (``FloatFunctional`` computes in float until ``convert`` swaps it).
FLOAT_CLASSES = ("FloatFunctional", "FXFloatFunctional")


def int8_modules(model: nn.Module) -> list[tuple[str, str]]:
    """``(path, qualified class)`` of every eager int8 module of ``model``, in module order."""
    out = []
    for path, module in model.named_modules():
        cls = type(module)
        if cls.__module__.startswith(INT8_NAMESPACES) and cls.__name__ not in FLOAT_CLASSES and \
                not cls.__module__.startswith(("torch.ao.nn.quantized.reference", "torch.nn.quantized.reference")):
            out.append((path or "root", f"{cls.__module__}.{cls.__qualname__}"))
    return out


def refuse_int8(model: nn.Module) -> None:
    """Raise if ``model`` holds eager int8 modules (see the module docstring).

    Raises:
        ConversionError: naming the first ones and what to convert instead.
    """
    found = int8_modules(model)
    if not found:
        return
    named = ", ".join(f"{path} ({cls.rsplit('.', 1)[-1]})" for path, cls in found[:3])
    raise ConversionError(
        f"{len(found)} eager int8 module{'s' if len(found) != 1 else ''} (made by torch.ao.quantization.convert): "
        f"{named}{', ...' if len(found) > 3 else ''}; their packed weights are TorchScript objects torch.export "
        "cannot trace and an IR cannot hold", implementation=found[0][0],
        hint="convert the model before tq.convert (prepared or QAT-prepared: float weights, observers and "
        "fake-quantize modules with their statistics) and run tq.convert on the rebuilt model (docs/extending.md, "
        "'torch.ao eager QAT')")


__all__ = ["int8_modules", "refuse_int8"]
