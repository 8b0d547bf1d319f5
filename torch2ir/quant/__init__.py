"""torch2ir.quant."""
