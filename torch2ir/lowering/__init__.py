"""torch2ir.lowering.flat."""
