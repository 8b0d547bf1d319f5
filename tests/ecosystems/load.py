"""Imports of the ecosystem packages the tests of this folder convert models of.

torchvision's compiled extension may not load with the installed torch build (its ``_C`` library is built against
another one). Its Python models need only the two operator schemas the extension registers, which
``torchvision._meta_registrations`` looks up at import: :func:`torchvision` defines them when, and only when, the
plain import fails, so a working extension is never shadowed.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# the schemas torchvision's extension registers (csrc/ops/nms.cpp and csrc/ops/quantized/cpu/qnms_kernel.cpp)
SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARIES: list = []  # a torch.library.Library lives as long as a reference to it


def torchvision() -> ModuleType:
    """``import torchvision``, defining the extension's operator schemas first if the import fails without them."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the failed import left half-initialised modules behind
    library = torch.library.Library("torchvision", "DEF")
    for name, schema in SCHEMAS.items():
        library.define(name + schema)
    _LIBRARIES.append(library)
    return importlib.import_module("torchvision")


def timm() -> ModuleType:
    """``import timm`` (which imports torchvision when it is installed)."""
    torchvision()
    return importlib.import_module("timm")


def diffusers() -> ModuleType:
    """``import diffusers`` (its models import torchvision lazily when it is installed)."""
    torchvision()
    return importlib.import_module("diffusers")
