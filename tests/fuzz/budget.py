"""How long the harness runs: bounded in CI, longer with ``URLSIEVE_FUZZ=long``.

- default (CI): few examples per property, the whole of ``tests/fuzz`` in well under a
  minute on a 2-core machine; the seed corpus always runs in full;
- ``URLSIEVE_FUZZ=long``: ``URLSIEVE_FUZZ_EXAMPLES`` examples per property (default
  5,000), for a session of minutes to hours; Hypothesis keeps the failures it finds in
  ``.hypothesis/`` and replays them first on the next run.

No deadline in either: examples are never judged by wall time.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG = os.environ.get("URLSIEVE_FUZZ", "").lower() == "long"
EXAMPLES = int(os.environ.get("URLSIEVE_FUZZ_EXAMPLES", "5000")) if LONG else 25

#: The settings of every property in tests/fuzz (a decorator).
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
