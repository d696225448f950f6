# SPDX-License-Identifier: MIT
"""Hypothesis profiles: ``dev`` (few examples, the default) and ``ci`` (more, derandomized; CI sets it)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=25, deadline=None)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    print_blob=True,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
