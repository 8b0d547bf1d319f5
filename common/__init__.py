"""Shared core of torch2ir / ir2torch: the IR, its files, validation, registries, safety, state."""

from .errors import IRError
from .flat import FlatIR
from .ir import IR, NODE_KINDS, Implementation
from .registry import Registry
from .state_dict import load_safetensors, remap_state_dict, save_safetensors
from .validate import validate
from .values import Ref
from .verify import VerifyReport, verify

__all__ = [
    "FlatIR", "IR", "IRError", "Implementation", "NODE_KINDS", "Ref", "Registry", "load_safetensors",
    "remap_state_dict", "save_safetensors", "validate", "verify", "VerifyReport",
]  # fmt: skip
