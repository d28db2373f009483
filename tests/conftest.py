from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# real Valkey servers (standalone, cluster) and a real DNS server (dnsmasq)
pytest_plugins = ["tests.seen.valkey_fixtures", "tests.neardup.dns_fixtures"]

settings.register_profile(
    "default", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
