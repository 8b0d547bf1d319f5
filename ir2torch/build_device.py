"""The device a builder runs on, and what a build on ``meta`` leaves out.

A builder (``builder(impl)``, :mod:`ir2torch.converter`) runs under ``torch.device(device)``, so that the
parameters and buffers it creates land there. On ``meta`` a tensor has no values: the random fills of
``torch.nn.init`` change nothing, but their meta kernels are Python decompositions (``uniform_`` about 50 us,
``normal_`` 0.7 ms: most of the time of an ``nn.Linear`` or ``nn.Embedding`` built on meta). :func:`building_on`
leaves out, on ``meta``, the fills whose meta kernel could only return the tensor as it is:

- ``aten.uniform_`` of a meta tensor: its meta kernel checks nothing (any bounds, any dtype);
- ``aten.normal_`` of a floating-point meta tensor whose ``std >= 0``: the only check its meta kernel makes
  there (any other call runs, and raises its own error);

both only without a generator and for a plain tensor or parameter (not a subclass). They are left out at the
dispatcher, below autograd: its checks (an in-place call on a leaf that requires grad, on an inference tensor)
and the version counter's bump happen as before. Every other op runs as under ``torch.device("meta")``: the
initialisers' own checks (fan-in of a tensor with fewer than 2 dimensions...), shapes, dtypes, and every op a
builder calls itself.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import TorchDispatchMode

_UNIFORM = torch.ops.aten.uniform_.default
_NORMAL = torch.ops.aten.normal_.default
_PLAIN = (torch.Tensor, nn.Parameter)


def _unchanged(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``func(*args, **kwargs)`` is one of the fills of the module docstring (it returns ``args[0]`` as it
    is)."""
    tensor = args[0]
    if type(tensor) not in _PLAIN or not tensor.is_meta or kwargs.get("generator") is not None:
        return False
    if func is _UNIFORM:
        return True
    std = args[2] if len(args) > 2 else kwargs.get("std", 1.0)
    return tensor.dtype.is_floating_point and std >= 0  # NaN fails: the kernel raises its own error


class _MetaFills(TorchDispatchMode):
    """Leaves out the fills of the module docstring; runs every other op as it is."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No dynamo guard around :meth:`__torch_dispatch__` (torch's default wraps it in one, whose first call
        imports ``torch._dynamo``: seconds and about 70 MB in a process that never compiles anything)."""
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if (func is _UNIFORM or func is _NORMAL) and _unchanged(func, args, kwargs):
            return args[0]
        return func(*args, **kwargs)


#: The fills' tensor methods and ``torch.nn.init``'s initialisers that run them (a torch function mode sees the
#: call of an initialiser, not the ops it runs): each runs under :class:`_MetaFills`, and nothing else does (a
#: dispatch mode costs every op it sees; the other initialisers' fills, ``fill_`` and ``zero_``, cost little).
_FILLING = frozenset([torch.Tensor.uniform_, torch.Tensor.normal_, nn.init.uniform_, nn.init.normal_,
                      nn.init.trunc_normal_, nn.init.xavier_uniform_, nn.init.xavier_normal_, nn.init.kaiming_uniform_,
                      nn.init.kaiming_normal_, nn.init.orthogonal_, nn.init.sparse_])


class _MetaDevice(DeviceContext):
    """``torch.device("meta")`` whose initialisers and fills run under :class:`_MetaFills`."""

    def __init__(self) -> None:
        super().__init__("meta")

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _FILLING:
            with _MetaFills():
                return func(*args, **(kwargs or {}))
        return super().__torch_function__(func, types, args, kwargs)


def building_on(device: torch.device | str | None) -> contextlib.AbstractContextManager[Any]:
    """The context a builder runs in: ``torch.device(device)`` (nothing for ``None``); on ``meta``, also without
    the fills of the module docstring."""
    if device is None:
        return contextlib.nullcontext()
    device = torch.device(device)
    return _MetaDevice() if device.type == "meta" else device


__all__ = ["building_on"]
