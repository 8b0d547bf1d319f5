"""Shared core of torch2ir / ir2torch: the IR, its files, validation, registries, safety, state.

The top-level name ``common`` is generic: another distribution shipping a ``common/`` package would
overwrite this one on install. ``torch2ir`` and ``ir2torch`` check :data:`__torch2ir_common__` on import
and refuse, with a clear message, a ``common`` that is not this one.
"""

__version__ = "0.1.0"
#: marker checked by ``import torch2ir`` / ``import ir2torch``: this ``common`` is the torch2ir project's
__torch2ir_common__ = True

# The composition root: the core's IR methods show an IR through presenters (common.presenters), which the core
# cannot import; they are installed here, where both layers may be imported.
from . import htmlview as _htmlview
from . import textview as _textview
from .compare import differences, equal
from .errors import IRError
from .flat import FlatIR
from .ir import IR, NODE_KINDS, Implementation
from .presenters import install as _install_presenters
from .registry import Registry
from .state_dict import load_safetensors, remap_state_dict, save_safetensors
from .validate import validate
from .values import Ref
from .verify import VerifyReport, verify

_install_presenters(summary=_textview.ir_summary, graph_text=_textview.graph_text, view=_htmlview.write_view)

__all__ = [
    "__version__", "FlatIR", "IR", "IRError", "Implementation", "NODE_KINDS", "Ref", "Registry", "differences", "equal",
    "load_safetensors",
    "remap_state_dict", "save_safetensors", "validate", "verify", "VerifyReport",
]  # fmt: skip
