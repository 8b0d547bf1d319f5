"""Public testing toolkit, importable from users' own test suites (needs the ``test`` extra).

- :func:`assert_roundtrip`: convert -> JSON -> rebuild -> load state -> verify, as one assertion;
- hypothesis strategies for IRs: :func:`irs`, :func:`ir_documents`, :func:`ir_values`,
  :func:`mutated_documents` (strategies for random *models* are still to come).
"""

from .roundtrip import assert_roundtrip
from .strategies import ir_documents, ir_values, irs, mutated_documents

__all__ = ["assert_roundtrip", "ir_documents", "ir_values", "irs", "mutated_documents"]
