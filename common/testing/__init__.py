"""Public testing toolkit, importable from users' own test suites (needs the ``test`` extra).

- :func:`assert_roundtrip`: convert -> JSON -> rebuild -> load state -> verify -> paths, keys, classes;
- hypothesis strategies for random *models*: :func:`models`, :func:`model_inputs`, :func:`models_and_inputs`
  (see :mod:`common.testing.models`);
- hypothesis strategies for IRs: :func:`irs`, :func:`ir_documents`, :func:`ir_values`, :func:`mutated_documents`.
"""

from .models import model_inputs, models, models_and_inputs
from .programs import RandomModel
from .roundtrip import assert_roundtrip
from .strategies import ir_documents, ir_values, irs, mutated_documents

__all__ = [
    "RandomModel", "assert_roundtrip", "ir_documents", "ir_values", "irs", "model_inputs", "models",
    "models_and_inputs", "mutated_documents",
]  # fmt: skip
