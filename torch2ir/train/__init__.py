"""torch2ir.train."""
