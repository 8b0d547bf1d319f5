"""The memory budget of a rebuild: a model too large to allocate is refused before anything is allocated.

An IR declares its sizes: ``Linear(10**9, 10**9)`` in a file is a few bytes of JSON and four
exabytes of parameters. Rebuilding on a real device (anything but ``"meta"``) first adds up what
the rebuild will allocate and raises :class:`~common.errors.ResourceBudgetError` when it exceeds
the budget, naming the largest implementations:

- an implementation rebuilt from its graph allocates its state records: shape x dtype item size
  for every record (symbolic dimensions count as 1, as they are created with size 1);
- an implementation built by a builder (``nn.Linear(**impl.data)``, an override) allocates what
  the builder creates from ``impl.data``, whatever the records say: the builder is first run on the
  ``meta`` device, which allocates nothing, and its parameters and buffers measured
  (:func:`ir2torch.rebuild.device.measured_on_meta`); the larger of that and the records counts. A builder
  that fails on ``meta`` is counted by its records.

The budget is, by default, the memory available now (``MemAvailable`` of ``/proc/meminfo``, else
``os.sysconf``; the free memory of a CUDA device for ``cuda``); an ``int`` sets it in bytes and
``None`` disables the check.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import ResourceBudgetError

#: The budget meaning "the memory available on the target device when the rebuild starts".
AVAILABLE = "available"

Budget = int | str | None


def target_device(device: torch.device | str | None) -> torch.device:
    """The device a rebuild allocates on: ``device``, else torch's default device."""
    if device is not None:
        return torch.device(device)
    return torch.get_default_device()


def available_bytes(device: torch.device) -> int | None:
    """Memory available for allocation on ``device`` now, or None when it cannot be told."""
    if device.type == "cuda" and torch.cuda.is_available():
        with contextlib.suppress(RuntimeError):
            return int(torch.cuda.mem_get_info(device)[0])
    with contextlib.suppress(OSError, ValueError), open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, AttributeError):
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    return None


def resolve_budget(budget: Budget, device: torch.device) -> tuple[int | None, str]:
    """``(bytes or None, description)`` of ``budget`` for a rebuild on ``device``.

    Raises:
        TypeError: ``budget`` is neither an int, :data:`AVAILABLE` nor None.
    """
    if budget is None or device.type == "meta":
        return None, "disabled"
    if budget == AVAILABLE:
        free = available_bytes(device)
        return free, f"the memory available on {device.type}"
    if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
        return budget, "max_bytes"
    raise TypeError(f"max_bytes must be a non-negative int, {AVAILABLE!r} or None, not {budget!r}")


def shape_bytes(shape: Iterable[Any], dtype: torch.dtype) -> int:
    """Bytes of a tensor of ``shape`` (symbolic dimensions count as 1) and ``dtype``."""
    numel = 1
    for dim in shape:
        numel *= dim if isinstance(dim, int) and not isinstance(dim, bool) else 1
    return numel * dtype.itemsize


def records_bytes(state: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes the state records of one implementation declare."""
    return sum(shape_bytes(rec["shape"], rec["dtype"]) for rec in state.values())


def module_bytes(module: nn.Module) -> int:
    """Bytes of the parameters and buffers of ``module`` and its children (each tensor once)."""
    seen: dict[int, int] = {}
    for tensor in (*module.parameters(), *module.buffers()):
        seen[id(tensor)] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def _count(value: Any) -> int:
    """A constructor's size argument as a count (a tuple's product; anything else 1)."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, (list, tuple)):
        total = 1
        for v in value:
            total *= _count(v)
        return total
    return 1


def int8_constructor_bytes(kind: str, data: Mapping[str, Any]) -> int:
    """Bytes the constructor of an eager int8 module (``torch.ao.nn.quantized``; its IR type ``kind``,
    :data:`common.quant.INT8_ARGUMENTS`) allocates from its arguments ``data``, computed without building it:
    those constructors pack their weights with kernels that do not run on ``meta``, so measuring them there
    (:func:`ir2torch.rebuild.device.measured_on_meta`) finds nothing. Linear: ``in x out`` int8 weights and a
    float bias (the packed copy counted twice); convolution: ``in / groups x out x kernel`` the same way;
    batch norm: four float vectors."""
    if kind.startswith("int8_linear") and kind != "int8_linear_packed_params":
        weights = _count(data.get("in_features")) * _count(data.get("out_features"))
        return 2 * weights + 8 * _count(data.get("out_features"))
    if kind.startswith(("int8_conv", "int8_convrelu")):
        kernel = data.get("kernel_size", 1)
        dims = int(kind[-2]) if kind[-2].isdigit() else 1
        kernel = _count(kernel) if isinstance(kernel, (list, tuple)) else _count(kernel) ** dims
        groups = max(_count(data.get("groups", 1)), 1)
        weights = _count(data.get("in_channels")) // groups * _count(data.get("out_channels")) * kernel
        return 2 * weights + 8 * _count(data.get("out_channels"))
    if kind.startswith(("int8_batchnorm", "int8_bnrelu")):
        return 16 * _count(data.get("num_features"))
    return 0


def human(size: int) -> str:
    """``size`` bytes in readable units (sizes beyond a float's range, from a crafted file, in exponent form)."""
    if size >= 1024**6 * 10**6:
        return f"more than 10^{len(str(size)) - 1} B"
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if value < 1024 or unit == "PB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{size} B"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns


def check_budget(sizes: Mapping[str, int], budget: Budget, device: torch.device, *, what: str,
                 measure: Callable[[], Mapping[str, int]] | None = None) -> None:
    """Refuse a rebuild whose sizes (bytes by implementation / weight) exceed ``budget``.

    Args:
        sizes: bytes each implementation (or weight) will allocate.
        budget: an int in bytes, :data:`AVAILABLE` or None (no check).
        device: the device allocated on (``meta`` is never checked).
        what: what the keys of ``sizes`` are ("implementation", "weight"), for the message.
        measure: called for ``sizes`` instead, only when there is a budget to check (when
            measuring costs something).

    Raises:
        ResourceBudgetError: the total exceeds the budget; names the largest entries.
        TypeError: ``budget`` is not a budget.
    """
    limit, source = resolve_budget(budget, device)
    if limit is None:
        return
    if measure is not None:
        sizes = measure()
    total = sum(sizes.values())
    if total <= limit:
        return
    largest = sorted((kv for kv in sizes.items() if kv[1]), key=lambda kv: -kv[1])[:3]
    listed = ", ".join(f"{key!r} ({human(size)})" for key, size in largest)
    raise ResourceBudgetError(
        f"rebuilding on {device} would allocate {human(total)} of parameters and buffers, more than the "
        f"budget of {human(limit)} ({source}); largest {what}s: {listed}; nothing was allocated",
        implementation=largest[0][0] if what == "implementation" else None,
        key=largest[0][0] if what != "implementation" else None,
        hint='rebuild on device="meta" (allocates nothing; a state dict given is then assigned, not copied), '
             "or set the budget: convert(..., max_bytes=<bytes>) (None disables the check)",
    )
