"""``IR.lower()``: the ATen-level FlatIR of an IR derived from its conversion's capture.

``torch2ir.convert`` keeps, in memory on the IR it returns (``ir.capture``, never in the JSON), what its one
``torch.export`` recorded; ``ir.lower()`` hands the IR to that capture, which builds the
:class:`~common.flat.FlatIR` without a second export. ``common`` does not import ``torch2ir``: the capture
is any object with a ``lower(ir, **options)`` method. An IR loaded from a file, or built by hand, has none.
"""

from __future__ import annotations

from typing import Any

from .errors import IRError


class NoCaptureError(IRError):
    """The IR carries no capture of a conversion (loaded from a file, built by hand, or dropped)."""


class IRLowering:
    """Mixin of :class:`~common.ir.IR`: the capture slot and :meth:`lower`."""

    #: What ``torch2ir.convert``'s export recorded (None for an IR loaded from a file or built by hand). It
    #: holds the exported program, which references the model's tensors: set it to None to release them.
    capture: Any = None

    def lower(self, **options: Any) -> Any:
        """The :class:`~common.flat.FlatIR` of this IR, from its conversion's capture (no second export).

        ``options`` are those of ``torch2ir.lower`` (``decompose=``, ``allow=``). Every node's ``source``
        names the node of this IR it was lowered from.

        Raises:
            NoCaptureError: the IR has no capture (loaded from a file, built by hand).
            IRError: the IR was changed after the conversion (the capture no longer describes it), or lowering
                failed (a ``ConversionError`` listing the constructs the FlatIR cannot hold).
        """
        if self.capture is None:
            raise no_capture_error()
        return self.capture.lower(self, **options)


def no_capture_error() -> NoCaptureError:
    """The error for lowering an IR that has no capture (shared with ``torch2ir.lower``)."""
    return NoCaptureError(
        "this IR has no capture of its conversion (it was loaded from a file, built by hand or copied without "
        "one), and the FlatIR cannot be rebuilt from the module-level IR alone: its handled leaves (nn.Linear, "
        "nn.LayerNorm, ...) are calls whose ATen ops the IR does not record",
        hint="lower the model instead: torch2ir.lower(model, args, kwargs), or convert it again with "
        "torch2ir.convert(model, args, kwargs) and call ir.lower() on the result",
    )


__all__ = ["IRLowering", "NoCaptureError", "no_capture_error"]
