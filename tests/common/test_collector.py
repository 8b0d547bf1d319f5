"""``common.collector.collector_paused``: the collector is off inside and restored after; with ``long_lived`` what
a large block made ends in the oldest generation (no young collection walks it), a small block's stays young, and
frozen objects stay frozen. Run in child processes: the test session freezes its own objects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = r'''
import gc, json, sys
from common.collector import collector_paused

scenario = sys.argv[1]
count = 1_000 if scenario == "small" else 200_000
if scenario == "frozen":
    gc.collect()
    gc.freeze()
if scenario == "disabled":
    gc.disable()
gc.collect()
frozen = gc.get_freeze_count()
with collector_paused(long_lived=True):
    enabled_inside = gc.isenabled()
    if scenario == "nested":
        with collector_paused(long_lived=True):
            kept = [{"n": [i]} for i in range(count)]
        enabled_inside = enabled_inside or gc.isenabled()
    else:
        kept = [{"n": [i]} for i in range(count)]
oldest = {id(o) for o in gc.get_objects(generation=2)}
print(json.dumps({
    "enabled_inside": enabled_inside, "enabled_after": gc.isenabled(), "young": gc.get_count()[0],
    "kept_in_oldest": sum(id(d) in oldest for d in kept), "kept": len(kept),
    "frozen_before": frozen, "frozen_after": gc.get_freeze_count(),
}))
'''


def _run(scenario: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _PROBE, scenario], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    return json.loads(done.stdout)


@pytest.mark.parametrize("scenario", ["plain", "nested"])
def test_what_the_block_makes_ends_in_the_oldest_generation(scenario):
    out = _run(scenario)
    assert out["enabled_inside"] is False and out["enabled_after"] is True
    assert out["kept_in_oldest"] == out["kept"] == 200_000  # none left to a young collection
    assert out["young"] < 700  # the next young collection has nothing of them to walk
    assert out["frozen_before"] == out["frozen_after"] == 0


def test_a_small_block_leaves_its_objects_young():
    out = _run("small")
    assert out["kept_in_oldest"] == 0 and out["enabled_after"] is True and out["frozen_before"] == 0


def test_frozen_objects_stay_frozen_and_nothing_is_moved():
    out = _run("frozen")
    assert out["frozen_before"] > 0 and out["frozen_after"] == out["frozen_before"]
    assert out["kept_in_oldest"] == 0 and out["enabled_after"] is True


def test_a_disabled_collector_stays_disabled_and_nothing_is_moved():
    out = _run("disabled")
    assert out["enabled_after"] is False and out["kept_in_oldest"] == 0
