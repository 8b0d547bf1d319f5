"""Operators on tensors fake tensors cannot stand for: quantized and mkldnn tensors, measured on stand-ins or by a
documented model, else refused.

A checked call (:class:`~ir2torch.run_safety.op_modes.Checked`) measures each op on fake tensors before it runs.
``FakeTensorMode`` cannot make a fake of a quantized tensor (``quint8``, ``qint8``, ``qint32``) or of an mkldnn
one, so such an op used to run unmeasured: ``quantize_per_tensor`` then ``repeat`` with a size from the file
allocated what it was told. Now:

- each such argument is replaced by a **stand-in**: a fake float32 tensor of its shape (strided, contiguous), 4 bytes
  an element, at least the item size of any quantized or mkldnn dtype; an ATen operator that runs on the stand-ins
  is measured by their outputs (an upper bound of the real ones: same shapes, item size at most 4);
- the kernels of ``torch.ao.nn.quantized`` modules (the ``quantized::`` operators, which take packed weights that
  no fake tensor stands for either) are measured by :func:`unmeasured_bytes`: a convolution or linear layer's
  output shape from its input and its unpacked weight and parameters (run as a float convolution or linear on
  stand-ins, plus the convolution's im2col workspace at 4 bytes an element), ``cat`` as the sum of its inputs,
  every other one (elementwise, normalisation, softmax) as its largest input;
- ``dequantize`` and ``int_repr`` as 4 bytes an element of their input, ``to_mkldnn`` and ``to_dense`` as a
  copy of their input, the quantization parameters' readers
  (``q_scale``, ``q_per_channel_scales``...) as the per-channel vectors at most;
- anything else is refused with an ``IRError`` naming the node, before it runs.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ir2torch.run_safety.workspace import workspace_bytes

#: Bytes an element of a stand-in counts (float32; quantized dtypes are 1 or 4 bytes).
STAND_IN_ITEM = 4


def proxy(mode: Any, t: torch.Tensor) -> torch.Tensor:
    """A fake of ``t`` under ``mode``, or for a quantized or mkldnn tensor a float32 stand-in of its shape."""
    if t.is_quantized or t.layout == torch._mkldnn:
        with mode:
            return torch.empty(tuple(t.shape), dtype=torch.float32, device=t.device)
    return mode.from_tensor(t)


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(tuple(t.shape), dtype=torch.float32, device="meta")


def _packed_weight(packed: Any) -> torch.Tensor | None:
    try:
        weight = packed.unpack()[0]
    except (AttributeError, RuntimeError, TypeError, IndexError):
        return None
    return weight if isinstance(weight, torch.Tensor) else None


def _conv(x: torch.Tensor, packed: Any) -> int | None:
    weight = _packed_weight(packed)
    if weight is None:
        return None
    try:
        stride, padding, dilation = list(packed.stride()), list(packed.padding()), list(packed.dilation())
        groups, transposed = int(packed.groups()), bool(packed.transpose())
        output_padding = list(packed.output_padding()) if transposed else [0] * len(stride)
        out = torch.ops.aten.convolution.default(_stand_in(x), _stand_in(weight), None, stride, padding, dilation,
                                                 transposed, output_padding, groups)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None
    work = workspace_bytes(torch.ops.aten.convolution.default, (_stand_in(x), _stand_in(weight), None, stride,
                                                                 padding, dilation, transposed, output_padding,
                                                                 groups), {}, out)
    return out.numel() * STAND_IN_ITEM + work


def _linear(x: torch.Tensor, packed: Any) -> int | None:
    weight = _packed_weight(packed)
    if weight is None or weight.dim() != 2 or x.dim() < 1:
        return None
    return math.prod(x.shape[:-1]) * weight.shape[0] * STAND_IN_ITEM


#: ATen operators a float stand-in cannot run (they read a quantized tensor's data or parameters, or convert to
#: or from mkldnn): their outputs' bytes from the tensors they take.
_ATEN: dict[str, Any] = {
    "aten::dequantize": lambda tensors: sum(t.numel() for t in tensors) * STAND_IN_ITEM,
    "aten::int_repr": lambda tensors: sum(t.numel() for t in tensors) * STAND_IN_ITEM,
    # layout conversions to and from mkldnn, which have no fake kernel: a copy of their input
    **{f"aten::{op}": lambda tensors: sum(t.numel() for t in tensors[:1]) * max(STAND_IN_ITEM, *(
        t.element_size() for t in tensors[:1])) for op in ("to_mkldnn", "_to_dense", "to_dense")},
    **{f"aten::{op}": lambda tensors: 0 for op in ("q_scale", "q_zero_point", "q_per_channel_axis", "qscheme")},
    **{f"aten::{op}": lambda tensors: sum(max(t.shape, default=1) for t in tensors) * 8
       for op in ("q_per_channel_scales", "q_per_channel_zero_points")},
}


#: ATen operators on quantized tensors whose output has the size of a float operator's on the same arguments: the
#: float operator runs on a ``meta`` stand-in of the input (nothing is allocated) and its output is measured.
_AS_FLOAT: dict[str, Any] = {
    "aten::quantized_max_pool1d": torch.ops.aten.max_pool1d.default,
    "aten::quantized_max_pool2d": torch.ops.aten.max_pool2d.default,
    "aten::quantized_max_pool3d": torch.ops.aten.max_pool3d.default,
}


def _as_float(op: Any, args: tuple, kwargs: dict[str, Any]) -> int | None:
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None:
        return None
    try:
        out = op(torch.empty(x.shape, device="meta"), *args[1:], **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return None  # arguments the float kernel refuses: no model, the op is refused
    return out.numel() * STAND_IN_ITEM


def unmeasured_bytes(func: Any, args: tuple, kwargs: dict[str, Any]) -> int | None:
    """Bytes (outputs and workspace) of a ``quantized::`` kernel whose arguments fake tensors cannot stand for, or
    ``None``: no model (the op is refused)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if schema.name in _ATEN:
        return _ATEN[schema.name](tensors)
    if schema.name in _AS_FLOAT:
        return _as_float(_AS_FLOAT[schema.name], args, kwargs)
    if not schema.name.startswith("quantized::"):
        return None
    name = schema.name.removeprefix("quantized::")
    packed = next((a for a in args if isinstance(a, torch.ScriptObject)), None)
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if name.startswith(("conv1d", "conv2d", "conv3d", "conv_transpose")):
        return _conv(x, packed) if x is not None and packed is not None else None
    if name.startswith("linear"):
        return _linear(x, packed) if x is not None and packed is not None else None
    if packed is not None or not tensors:
        return None
    if name.startswith("cat"):
        return sum(t.numel() for t in tensors) * STAND_IN_ITEM
    if name.startswith("matmul"):
        try:
            out = torch.matmul(*[_stand_in(t) for t in tensors[:2]])
        except RuntimeError:
            return None
        return out.numel() * STAND_IN_ITEM
    try:  # elementwise (add, mul, relu6, hardswish...), normalisation, softmax: the broadcast of its tensors
        shape = torch.broadcast_shapes(*(tuple(t.shape) for t in tensors))
        numel = math.prod(shape)
    except RuntimeError:
        numel = max(t.numel() for t in tensors)  # a normalisation's per-channel statistics
    return max(numel, max(t.numel() for t in tensors)) * STAND_IN_ITEM


__all__ = ["STAND_IN_ITEM", "proxy", "unmeasured_bytes"]
