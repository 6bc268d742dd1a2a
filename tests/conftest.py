"""Hypothesis profiles: ``ci`` (default: fast, derandomised) and ``thorough``.

Select with ``DSAMPLER_HYPOTHESIS_PROFILE=thorough pytest``. The ``ci`` profile draws
its examples from a fixed seed and keeps no example database, so two runs of the suite
test exactly the same inputs.
"""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, settings

# One intra-op thread in each test process and in the processes it starts, unless
# OMP_NUM_THREADS is given: the suite runs in two workers on two cores (the README's test
# command), where torch's default of a thread per core in each worker made them contend
# (the token kit's suite took 78 s with it, 37 s without).
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

#: Which tests run together under pytest-xdist (tests/xdist_groups.py).
pytest_plugins = ["xdist_groups"]

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


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Count the composition matrix's cells (tests/test_composition_matrix.py) and how
    each ended, for the test command's output."""
    ended: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "composition" and getattr(report, "when", "") == "call":
                    ended[value] = ended.get(value, 0) + 1
    if ended:
        import composition

        shown = ", ".join(f"{count} {how}" for how, count in sorted(ended.items()))
        terminalreporter.write_line(
            f"composition matrix: {sum(ended.values())} of {len(composition.all_cells())} "
            f"cells run ({shown}); DSAMPLER_COMPOSITION=full runs them all"
        )
