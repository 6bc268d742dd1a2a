"""Hypothesis profiles: ``ci`` (default: fast, derandomised) and ``thorough``.

Select with ``DSAMPLER_HYPOTHESIS_PROFILE=thorough pytest``. The ``ci`` profile draws
its examples from a fixed seed and keeps no example database, so two runs of the suite
test exactly the same inputs.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_VARIABLE = "DSAMPLER_HYPOTHESIS_PROFILE"

settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=1500,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)

_profile = os.environ.get(PROFILE_VARIABLE, "ci")
if _profile not in ("ci", "thorough"):
    raise ValueError(f"{PROFILE_VARIABLE} must be 'ci' or 'thorough', got {_profile!r}")
settings.load_profile(_profile)
