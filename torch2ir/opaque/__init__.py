"""Modules ``torch.export`` cannot trace.

This package owns what happens when the export of a model fails:

- :mod:`~torch2ir.opaque.attribution`: which module's own trace failed (the smallest one: its dotted path,
  qualified class and why), so that the refusal names it instead of the root;
- :mod:`~torch2ir.opaque.leaves` (opt-in, ``opaque="auto"`` or ``opaque=[classes]``): keeping such modules out
  of the trace as *opaque leaves*, one node of type ``"opaque"`` each in their parent's graph (their data,
  constructor arguments and tensor attributes);
- :mod:`~torch2ir.opaque.recording`: the one eager call that records what they return, and the stand-ins that
  replay it during the export;
- :mod:`~torch2ir.opaque.children`: the children of opaque leaves (an opaque root's included), converted on
  their own on the inputs of their eager call and grafted into the IR;
- :mod:`~torch2ir.opaque.custom_calls`: the modules whose own code calls custom ``autograd.Function`` classes (their
  backward is not in a trace), which ``opaque="auto"`` keeps opaque too, and the warning naming them otherwise;
- :mod:`~torch2ir.opaque.driver`: the loop of ``opaque="auto"``.

It may import ``common`` and the tracing modules of ``torch2ir`` below :mod:`torch2ir.hierarchy.build` (whose builder
the driver is handed), never ``ir2torch``.
"""

from torch2ir.opaque.attribution import Failure, attribute_failure

__all__ = ["Failure", "attribute_failure"]
