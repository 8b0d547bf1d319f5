"""Operator namespaces torch itself defines in a module it does not import at start-up.

``quantized_decomposed`` (the (de)quantize ops of PT2E's ``convert_pt2e``) is registered by
``torch.ao.quantization.fx._decomposed``, which ``import torch`` does not load: a fresh process loading a PT2E
file would find no such operator. :func:`load_torch_library` imports that module, a fixed name of torch's own
(the table below, never a string of a file), when an IR names an operator of the namespace; the operator is
still called only when the allow-list allows it (``allow=["quantized_decomposed::*"]``).
"""

from __future__ import annotations

import importlib

#: ``{operator namespace: the torch module that registers it}``.
TORCH_LIBRARIES: dict[str, str] = {"quantized_decomposed": "torch.ao.quantization.fx._decomposed"}
_LOADED: set[str] = set()


def load_torch_library(namespace: str) -> bool:
    """Import the torch module registering ``namespace`` (once); False when torch defines no such module."""
    module = TORCH_LIBRARIES.get(namespace)
    if module is None:
        return False
    if namespace not in _LOADED:
        importlib.import_module(module)
        _LOADED.add(namespace)
    return True


__all__ = ["TORCH_LIBRARIES", "load_torch_library"]
