"""Running a model's code on stand-in tensors never changes its own Python attributes.

Converting calls the model's code for real (``torch.export``'s non-strict trace and the train-mode pass run its
Python), and so does a rebuild's fake-tensor probe of a call's memory and compute: a module that counts its calls
in a plain attribute (brevitas' runtime statistics: ``counter``, which decides whether a scale is still being
collected and whether the scale is in the state dict) would come out of either with another value, and behave
otherwise afterwards. :func:`kept_attributes` puts every module's own attributes back as they were (rebinding
only: an object changed in place stays changed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def kept_attributes(model: nn.Module) -> Iterator[None]:
    """Restore the instance attributes of every module of ``model`` on exit: values rebound are bound again to the
    objects they held, attributes added are removed, attributes removed come back."""
    saved = [(module, dict(vars(module))) for module in model.modules()]
    try:
        yield
    finally:
        for module, before in saved:
            now = vars(module)
            for name in [n for n in now if n not in before]:
                del now[name]
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    now[name] = value


_MISSING = object()

__all__ = ["kept_attributes"]
