"""Running a model's code on stand-in tensors never changes the numbers and flags its modules keep.

Converting calls the model's code for real (``torch.export``'s non-strict trace and the train-mode pass run its
Python), and so does a rebuild's fake-tensor probe of a call's memory and compute: a module that counts its calls
in a plain attribute (brevitas' runtime statistics: ``counter``, which decides whether a scale is still being
collected and whether the scale is in the state dict) would come out of either with another value, and behave
otherwise afterwards. :func:`kept_attributes` puts every module's numbers and flags back as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def kept_attributes(model: nn.Module) -> Iterator[None]:
    """Put back, on exit, every number and flag (``bool``, ``int``, ``float`` attributes) a module of ``model`` held
    and the run rebound to another number: a counter, a step, an ``init_done``. Other attributes are left as the run
    left them: code generated at a rebuilt module's first call, or caches a library fills, stay consistent with
    what they fill in place."""
    saved = [(module, {k: v for k, v in vars(module).items() if type(v) in _NUMBERS}) for module in model.modules()]
    try:
        yield
    finally:
        for module, before in saved:
            now = vars(module)
            for name, value in before.items():
                if type(now.get(name, _MISSING)) in _NUMBERS and now[name] is not value:
                    now[name] = value


_NUMBERS = (bool, int, float)
_MISSING = object()

__all__ = ["kept_attributes"]
