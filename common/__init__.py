"""Shared core of torch2ir / ir2torch: the IR, its files, validation, registries, safety."""

from .errors import IRError
from .ir import IR, NODE_KINDS, Implementation
from .registry import Registry
from .validate import validate
from .values import Ref

__all__ = ["IR", "IRError", "Implementation", "NODE_KINDS", "Ref", "Registry", "validate"]
