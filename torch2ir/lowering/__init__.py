"""The ATen-level IR: a weight-free :class:`~common.flat.FlatIR` of an exported program.

- :mod:`.flat`: lowering an exported program (on ``meta``) to a FlatIR;
- :mod:`.capture`: the capture a conversion keeps, so ``IR.lower()`` needs no second export.

May import: ``common`` (its core), torch and ``torch2ir.frontend``. Never ``ir2torch``.
"""
