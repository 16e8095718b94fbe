"""Shared test settings.

The hypothesis profile keeps the codec suite fast enough to run on every change (a few hundred
examples per property, no per-example deadline because the first call into Proton's C library
is slow) and stores no example database in the working tree.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# A thorough run: HYPOTHESIS_PROFILE=thorough
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=5000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
