"""Pausing Python's cyclic garbage collector while building a large object graph.

Converting a model and reading an IR or FlatIR allocate many small, long-lived containers (graph nodes,
attribute dicts, decoded JSON). Each allocation burst triggers collections that walk every tracked object
of the process, the model and torch's own included; at Llama-70B dimensions this was about 45% of
``IR.load``. Nothing built here is garbage, so the collector is paused for the duration and restored
(with the state it had) afterwards; reference counting still frees everything as usual.

Objects made while the collector is paused are still counted as young: the first collection after it resumes
walks every one of them, and the next older generation's collection walks them again (at 10**5 rebuilt modules,
3.5 million objects: 0.7 s and 1 s). With ``long_lived=True`` (a rebuilt model, a loaded IR: what the caller
keeps), a block that made many objects (:data:`PROMOTE_AT`) has them placed in the oldest generation when it
ends, where only full collections walk them, as they would be after surviving two younger collections:
``gc.freeze()`` then ``gc.unfreeze()``, which moves every tracked object to the oldest generation without walking
any. The young garbage of before the block (at most what the young generations hold between two collections)
moves with them, and is freed by the next full collection. Nothing is moved when objects are frozen already
(someone froze them on purpose: they stay frozen); telling that walks the frozen objects, so it is asked only
for such a large block.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: Tracked objects a ``long_lived`` block must have made for them to be moved (a smaller block's young collection
#: costs little).
PROMOTE_AT = 100_000


@contextlib.contextmanager
def collector_paused(*, long_lived: bool = False) -> Iterator[None]:
    """Disable the cyclic garbage collector inside the block; re-enable it after if it was enabled.

    ``long_lived``: what the block makes is kept; when it made :data:`PROMOTE_AT` tracked objects or more, put
    them in the oldest generation at the end (see the module docstring). Only when the collector was enabled (an
    outer block decides otherwise) and nothing is frozen.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if long_lived and gc.get_count()[0] >= PROMOTE_AT and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


__all__ = ["PROMOTE_AT", "collector_paused"]
