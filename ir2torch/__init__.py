"""ir2torch: rebuild real ``nn.Module``s from a torch2ir IR."""

from .converter import Ir2Torch, convert, get_default_converter

__all__ = ["Ir2Torch", "convert", "get_default_converter"]
