"""torch2ir.hierarchy.recover."""
