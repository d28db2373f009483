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
    StoreCase("exact", lambda request, tmp: f"exact:{tmp}/seen.exact", exact=True, persistent=True),
    StoreCase(
        "exact-growing",  # starts tiny: the contract runs across many growths
        lambda request, tmp: f"exact:{tmp}/seen.exact?capacity=10",
        exact=True,
        persistent=True,
    ),
    StoreCase(
        "partitioned",  # tiny partitions: each grows several times under the contract
        lambda request, tmp: f"partitioned:{tmp}/seen.d?partitions=4&capacity=40",
        exact=True,
        persistent=True,
    ),
    StoreCase(
        "bloom", lambda request, tmp: f"bloom:{tmp}/seen.bloom", exact=False, persistent=True
    ),
    StoreCase(
        "bloom-growing",  # starts tiny: the contract runs across many layers
        lambda request, tmp: f"bloom:{tmp}/seen.bloom?capacity=500&error=0.001",
        exact=False,
        persistent=True,
    ),
    # Seed 002 at a reduced width (256 files of 8 KB instead of 2 MB) to keep tests small.
    StoreCase(
        "bitmap-crc32",
        lambda request, tmp: f"bitmap:{tmp / 'bm'}?signature=crc32&width=24",
        exact=False,
        persistent=True,
    ),
    StoreCase(
        "bitmap-md5",
        lambda request, tmp: f"bitmap:{tmp / 'bm'}?signature=md5&width=26",
        exact=False,
        persistent=True,
    ),
    StoreCase(
        "buckets",
        lambda request, tmp: f"buckets:{tmp / 'seen.buckets'}?buckets=1024",
        exact=True,
        persistent=True,
    ),
    StoreCase(
        "dsbf",
        lambda request, tmp: f"dsbf:{tmp / 'seen.dsbf'}?capacity=5000&error=0.01&leaf_bits=16384",
        exact=False,
        persistent=True,
    ),
    StoreCase("dsbf-memory", lambda request, tmp: "dsbf:", exact=False, persistent=False),
    StoreCase("buckets-memory", lambda request, tmp: "buckets:", exact=True, persistent=False),
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
