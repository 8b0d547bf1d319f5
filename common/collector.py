"""Pausing Python's cyclic garbage collector while building a large object graph.

Converting a model and reading an IR or FlatIR allocate many small, long-lived containers (graph nodes,
attribute dicts, decoded JSON). Each allocation burst triggers collections that walk every tracked object
of the process, the model and torch's own included; at Llama-70B dimensions this was about 45% of
``IR.load``. Nothing built here is garbage, so the collector is paused for the duration and restored
(with the state it had) afterwards; reference counting still frees everything as usual.

Objects made while the collector is paused are still counted as young: the first collection after it resumes
walks every one of them, and the next older generation's collection walks them again (at 10**5 rebuilt modules,
3.5 million objects: 0.7 s and 1 s). With ``long_lived=True`` (a rebuilt model, a loaded IR: what the caller
keeps) they are placed in the oldest generation when the block ends, where only full collections walk them, as
they would after surviving two younger collections: ``gc.freeze()`` then ``gc.unfreeze()``, which moves every
tracked object to the oldest generation without walking any. So that no garbage is kept longer by it, the young
generations are collected when the block starts (they hold a few thousand objects, unless the collector was
off); and nothing is moved when objects are frozen already (someone froze them on purpose: they stay frozen).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(*, long_lived: bool = False) -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block; re-enable it after if it was enabled.

    ``long_lived``: what the block makes is kept; put it in the oldest generation at the end (see the module
    docstring). Only when the collector was enabled (an outer block decides otherwise) and nothing is frozen.
    """
    enabled = gc.isenabled()
    promote = long_lived and enabled and gc.get_freeze_count() == 0
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if promote and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


__all__ = ["collector_paused"]
