"""Tracing each distinct block once (``convert(..., trace_once=True)``, the default).

- :mod:`.groups`, :mod:`.watch`: which module instances are alike (up to an index such as ``layer_idx``);
- :mod:`.trace`: stand-ins for the alike blocks during the one export, and their traced calls;
- :mod:`.instances`: the IR side: every instance made from the one traced body;
- :mod:`.eager`: the same stand-ins for the eager train-mode passes on meta tensors;
- :mod:`.lower`: lowering a conversion that traced alike blocks once.

May import: ``common`` (its core), torch, ``torch2ir.frontend`` and ``torch2ir.hierarchy``'s helpers. Never
``ir2torch``.
"""
