"""Pausing Python's cyclic garbage collector while building a large object graph.

Converting a model and reading an IR or FlatIR allocate many small, long-lived containers (graph nodes,
attribute dicts, decoded JSON). Each allocation burst triggers collections that walk every tracked object
of the process, the model and torch's own included; at Llama-70B dimensions this was about 45% of
``IR.load``. Nothing built here is garbage, so the collector is paused for the duration and restored
(with the state it had) afterwards; reference counting still frees everything as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block; re-enable it after if it was enabled."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


__all__ = ["collector_paused"]
