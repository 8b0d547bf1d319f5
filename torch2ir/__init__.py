"""torch2ir: convert PyTorch models into the torch2ir IR."""

from .converter import Torch2Ir, convert, get_default_converter
from .lowering import lower

__all__ = ["Torch2Ir", "convert", "get_default_converter", "lower"]
