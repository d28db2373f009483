"""The backends the seen-store contract suite runs over: add a backend by adding a case.

``spec(request, tmp_path)`` returns the spec to open; it may request fixtures
(for example a running server) through ``request.getfixturevalue``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import valkey_spec


@dataclass(frozen=True)
class StoreCase:
    id: str
    spec: Callable[[pytest.FixtureRequest, Path], str]
    exact: bool  # no false positives, exact len()
    persistent: bool  # contents survive close() and reopen


CASES: list[StoreCase] = [
    StoreCase("memory", lambda request, tmp: "memory:", exact=True, persistent=False),
]

# Valkey/Redis: every kind on a standalone server and on a 3-primary cluster.
CASES += [
    StoreCase(
        f"valkey-{kind}-{where}",
        lambda request, tmp, kind=kind, fixture=fixture: valkey_spec(
            request, fixture, kind, "&capacity=100000"
        ),
        exact=kind == "exact",
        persistent=True,
    )
    for kind in ("exact", "bloom", "dsbf")
    for where, fixture in (("standalone", "valkey_server"), ("cluster", "valkey_cluster"))
]
