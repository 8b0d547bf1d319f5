"""Imports of the ecosystem packages the tests of this folder (and ``benchmarks/sweep.py``) convert models of.

``make test-zoo`` installs them (pinned in ``requirements.txt`` beside this file) into their own folder,
``.venv/zoo-site``, and passes it as ``TORCH2IR_ZOO_SITE``; :func:`zoo_site` appends that folder to the end of
``sys.path`` when a package is not importable already (an environment that has them installed uses its own).
They stay out of ``.venv`` because transformers imports torchvision whenever it is installed: with an extension
that does not load, every process importing transformers would fail.

torchvision's compiled extension may not load with the installed torch build (its ``_C`` library is built against
another one). Its Python models need only the two operator schemas the extension registers, which
``torchvision._meta_registrations`` looks up at import: :func:`torchvision` defines them when, and only when, the
plain import fails, so a working extension is never shadowed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

#: where ``make test-zoo`` installs the packages when ``TORCH2IR_ZOO_SITE`` does not say
DEFAULT_SITE = Path(__file__).resolve().parents[2] / ".venv" / "zoo-site"


def zoo_site(package: str = "torchvision") -> None:
    """Make ``package`` importable: as installed, or from the folder ``make test-zoo`` installs into.

    Raises:
        ModuleNotFoundError: neither has it (the message says how to install it).
    """
    if importlib.util.find_spec(package) is not None:
        return
    folder = os.environ.get("TORCH2IR_ZOO_SITE") or str(DEFAULT_SITE)
    if folder not in sys.path and os.path.isdir(folder):
        sys.path.append(folder)  # last: never shadows a package of the environment
        importlib.invalidate_caches()
    if importlib.util.find_spec(package) is None:
        raise ModuleNotFoundError(f"{package} is not installed: run `make test-zoo` (it installs the ecosystem "
                                  f"packages into {DEFAULT_SITE}), or pip install -r tests/ecosystems/requirements.txt")

# the schemas torchvision's extension registers (csrc/ops/nms.cpp and csrc/ops/quantized/cpu/qnms_kernel.cpp)
SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARIES: list = []  # a torch.library.Library lives as long as a reference to it


def torchvision() -> ModuleType:
    """``import torchvision``, defining the extension's operator schemas first if the import fails without them."""
    zoo_site("torchvision")
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


def model_explorer() -> ModuleType:
    """``import model_explorer`` (Google's Model Explorer, without its optional C++ graph adapter); torchvision first:
    the folder it comes from holds torchvision, which transformers then imports."""
    torchvision()
    zoo_site("model_explorer")
    return importlib.import_module("model_explorer")
