"""One contract for the warn grant stores (memory, SQLite, Valkey), opened from their specs.

Every backend registers in :data:`urlsieve.policy.warn.GRANT_BACKENDS` (the storage floor's
registry) and raises the same ``Store*`` errors as every other store.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import ServerProcess
from urlsieve.exceptions import ConfigError, StoreCorrupt, StoreError, StoreUnavailable
from urlsieve.policy.warn import GRANT_BACKENDS, GrantStore, grant_key, open_grants


def spec_for(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "memory":
        return "memory:"
    if kind == "sqlite":
        return f"sqlite:{tmp_path / 'grants.db'}"
    server: ServerProcess = request.getfixturevalue("valkey_server")
    return f"valkey://127.0.0.1:{server.port}/0?prefix=g{uuid.uuid4().hex}:"


@pytest.fixture(params=["memory", "sqlite", "valkey"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return spec_for(request.param, request, tmp_path)


@pytest.fixture
def store(spec: str) -> Iterator[GrantStore]:
    opened = open_grants(spec)
    yield opened
    opened.close()


def test_a_grant_covers_its_key_only(store: GrantStore) -> None:
    key = grant_key("addr:10.0.0.7", "a.b.social.example")
    assert not store.granted(key)
    store.grant(key, 60)
    assert store.granted(key)
    assert store.granted(grant_key("addr:10.0.0.7", "other.social.example"))  # the site
    assert not store.granted(grant_key("addr:10.0.0.8", "a.b.social.example"))
    assert not store.granted(grant_key("addr:10.0.0.7", "elsewhere.example"))


def test_a_grant_expires(store: GrantStore) -> None:
    key = grant_key("user:bob", "social.example")
    store.grant(key, 1)
    assert store.granted(key)
    time.sleep(1.3)
    assert not store.granted(key)


@pytest.mark.parametrize("kind", ["sqlite", "valkey"])
def test_a_second_handle_sees_the_grant(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    spec = spec_for(kind, request, tmp_path)
    with_a, with_b = open_grants(spec), open_grants(spec)
    key = grant_key("addr:10.1.1.1", "news.example")
    with_a.grant(key, 60)
    assert with_b.granted(key)
    with_a.close()
    with_b.close()


def test_a_server_that_does_not_answer_is_store_unavailable() -> None:
    store = open_grants("valkey://127.0.0.1:1/0?timeout=0.5")
    with pytest.raises(StoreUnavailable, match=r"warn grants.*127\.0\.0\.1:1"):
        store.granted("k")
    with pytest.raises(StoreUnavailable):
        store.grant("k", 5)


def test_a_file_that_is_not_a_database_is_store_corrupt(tmp_path: Path) -> None:
    damaged = tmp_path / "grants.db"
    damaged.write_bytes(b"this is not an SQLite database" * 200)
    with pytest.raises(StoreCorrupt, match=r"grants\.db: not a warn grants database"):
        open_grants(f"sqlite:{damaged}")


def test_a_directory_that_does_not_exist_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="warn grants"):
        open_grants(f"sqlite:{tmp_path / 'missing' / 'grants.db'}")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuch:x", "unknown warn_store backend 'nosuch'"),
        ("memory:x", "memory: takes no location"),
        ("sqlite:", "needs a path"),
        ("valkey:localhost", "write valkey://host:port/db"),
        ("valkey://127.0.0.1:6379/0?ttl=5", "unknown parameter 'ttl'"),
        ("valkey://127.0.0.1:6379/0?timeout=soon", "timeout='soon' is not a valid float"),
        ("grants.db", "has no backend"),
    ],
)
def test_bad_specs_say_what_to_write(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_grants(spec)


def test_every_backend_is_in_the_registry() -> None:
    assert {"memory", "sqlite", "valkey", "valkeys", "redis", "rediss", "unix"} <= set(
        GRANT_BACKENDS
    )
