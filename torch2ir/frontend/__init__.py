"""torch2ir.frontend.export."""
