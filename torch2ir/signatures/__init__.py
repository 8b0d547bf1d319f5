"""torch2ir.signatures.record."""
