"""Modules ``torch.export`` cannot trace.

This package owns two things about them:

- :mod:`~torch2ir.opaque.attribution`: when the export of a model fails, which module's own trace failed (the
  smallest one: its dotted path, qualified class and why), so that the refusal names it instead of the root;
- :mod:`~torch2ir.opaque.leaves` (opt-in, ``opaque="auto"`` or ``opaque=[classes]``): keeping such modules out
  of the trace as *opaque leaves*, one node of type ``"opaque"`` each in their parent's graph.
"""

from .attribution import Failure, attribute_failure

__all__ = ["Failure", "attribute_failure"]
