"""Public testing toolkit: hypothesis strategies for IRs (and, later, models).

Importable from users' own test suites; needs the ``test`` extra (``hypothesis``).
"""

from .strategies import ir_documents, ir_values, irs, mutated_documents

__all__ = ["ir_documents", "ir_values", "irs", "mutated_documents"]
