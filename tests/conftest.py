"""Shared test configuration: hypothesis profiles.

``HYPOTHESIS_PROFILE=long`` multiplies every property test's example count by 10.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1


def examples(n: int) -> int:
    """Example count for a property test: ``n`` by default, ``10 * n`` under the long profile."""
    return n * SCALE
