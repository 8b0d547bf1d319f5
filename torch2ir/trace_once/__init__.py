"""torch2ir.trace_once.trace."""
