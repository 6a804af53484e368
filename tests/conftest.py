"""Hypothesis draws the same examples on every run (``derandomize``): an unchanged tree
never fails one CI run and passes the next on a new random example. To hunt for new
failures, run with ``HYPOTHESIS_PROFILE=explore`` (random examples, and the example
database that replays the failures found) and add each one found as an ``@example``."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
