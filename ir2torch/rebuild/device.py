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

The calls that reach nothing else (:func:`_quick`): the two tensor methods when autograd has nothing to check
(grad mode off or a tensor that does not require grad, not an inference tensor), ``nn.init.uniform_`` /
``normal_`` (which fill under ``no_grad``) and ``nn.init.kaiming_uniform_`` (the initialiser of ``nn.Linear``
and the convolutions, whose fan and gain torch's own helpers compute first, with their errors) skip the
dispatch too: only the version counter's bump is done, by ``torch.autograd.graph.increment_version``. A build
of 10**5 ``nn.Linear`` on meta takes half the time.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import increment_version
from torch.utils._device import DeviceContext
from torch.utils._python_dispatch import TorchDispatchMode

from ir2torch.run_safety.budget import module_bytes

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


def _argument(args: tuple, kwargs: dict, index: int, name: str, default: Any) -> Any:
    return args[index] if len(args) > index else kwargs.get(name, default)


def _quick(func: Any, args: tuple, kwargs: dict) -> bool:
    """Whether ``func(*args, **kwargs)``, one of :data:`_FILLING`, is a call of the module docstring that only
    bumps its tensor's version (after its initialiser's own checks, run here): then the caller does that instead.

    Raises:
        Exception: what the initialiser's checks raise (the call as a whole would raise it too).
    """
    method = func is _TENSOR_UNIFORM or func is _TENSOR_NORMAL
    tensor = args[0] if method else _argument(args, kwargs, 0, "tensor", None)
    if (type(tensor) not in _PLAIN or not tensor.is_meta or tensor.is_inference()
            or kwargs.get("generator") is not None):  # keyword-only or passed by keyword by the initialisers
        return False
    if method and tensor.requires_grad and torch.is_grad_enabled():  # autograd's leaf and view checks
        return False
    if func is _TENSOR_UNIFORM or func is nn.init.uniform_:
        return True
    if func is _TENSOR_NORMAL or func is nn.init.normal_:
        std = _argument(args, kwargs, 2, "std", 1.0)
        return tensor.dtype.is_floating_point and std >= 0
    if func is nn.init.kaiming_uniform_ and 0 not in tensor.shape:  # zero elements: a warning, run as it is
        fan = nn.init._calculate_correct_fan(tensor, _argument(args, kwargs, 2, "mode", "fan_in"))
        gain = nn.init.calculate_gain(_argument(args, kwargs, 3, "nonlinearity", "leaky_relu"),
                                      _argument(args, kwargs, 1, "a", 0))
        gain / math.sqrt(fan)  # its errors (a zero fan) are the initialiser's
        return True
    return False


_TENSOR_UNIFORM, _TENSOR_NORMAL = torch.Tensor.uniform_, torch.Tensor.normal_


class _MetaDevice(DeviceContext):
    """``torch.device("meta")`` whose initialisers and fills run under :class:`_MetaFills`."""

    def __init__(self) -> None:
        super().__init__("meta")

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in _FILLING:
            kwargs = kwargs or {}
            if _quick(func, args, kwargs):
                tensor = args[0] if args else kwargs["tensor"]
                increment_version(tensor)
                return tensor
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


def measured_on_meta(build: Callable[[], nn.Module]) -> int:
    """Bytes of the module ``build()`` returns when run on ``meta``; 0 if it fails there."""
    try:
        with building_on("meta"):
            module = build()
    except Exception:  # noqa: BLE001 - the real build raises its own error; this only measures
        return 0
    return module_bytes(module) if isinstance(module, nn.Module) else 0


__all__ = ["building_on", "measured_on_meta"]
