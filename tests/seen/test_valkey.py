"""Valkey/Redis stores beyond the shared contract: specs, layout, agreement, errors."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import (
    Cluster,
    ServerProcess,
    start_server,
    unique_prefix,
    valkey_spec,
)
from urlsieve import (
    CRAWLER,
    ConfigError,
    ProfileMismatch,
    StoreCorrupt,
    StoreUnavailable,
)
from urlsieve.seen import open_seen
from urlsieve.seen.valkey import BatchInterrupted, ValkeyStore

KINDS = ["exact", "bloom", "dsbf"]


def urls(n: int, tag: str = "u") -> list[str]:
    return [f"http://{tag}{i % 997}.example.org/p/{i}?x={i * 31}" for i in range(n)]


# ---------------------------------------------------------------------- specs


@pytest.mark.parametrize("scheme", ["valkey", "redis"])
@pytest.mark.parametrize("kind", KINDS)
def test_open_seen_round_trip_over_tcp_schemes(
    valkey_server: ServerProcess, scheme: str, kind: str
) -> None:
    prefix = unique_prefix()
    spec = f"{scheme}://127.0.0.1:{valkey_server.port}/0?kind={kind}&prefix={prefix}&batch=64"
    batch = urls(500)
    with open_seen(spec) as store:
        assert isinstance(store, ValkeyStore)
        assert store.batch == 64
        assert all(store.add_many(batch))
    with open_seen(spec) as again:  # another client, same store
        assert all(again.contains_many(batch))
        assert not any(again.add_many(batch))


def test_unix_socket_spec_and_db_number(tmp_path: Path) -> None:
    sock = tmp_path / "v.sock"
    server = start_server(tmp_path / "data", "--unixsocket", str(sock), "--unixsocketperm", "700")
    try:
        spec = f"unix://{sock}?db=3&kind=exact&prefix=crawl"
        with open_seen(spec) as store:
            assert store.add("http://example.com/a") is True
        with server.client() as c:
            c.select(3)  # type: ignore[no-untyped-call]
            assert c.exists("{crawl}:meta")
        with open_seen(spec) as store:
            assert "http://example.com/a" in store
    finally:
        server.stop()


def test_bad_specs_fail_at_open_with_the_fix(valkey_server: ServerProcess) -> None:
    base = f"valkey://127.0.0.1:{valkey_server.port}/0"
    with pytest.raises(ConfigError, match="choose from exact, bloom, dsbf"):
        open_seen(f"{base}?kind=cuckoo")
    with pytest.raises(ConfigError, match="kind=exact takes no blocks"):
        open_seen(f"{base}?kind=exact&blocks=4")
    with pytest.raises(ConfigError, match="allowed:"):
        open_seen(f"{base}?kind=exact&colour=red")
    with pytest.raises(ConfigError, match="no ':' or braces"):
        open_seen(f"{base}?prefix=a{{b}}")
    # "a:x0" would share keys with the store "a" ({a:x0}:n is a's shard-0 count).
    with pytest.raises(ConfigError, match="no ':' or braces"):
        open_seen(f"{base}?kind=bloom&prefix=a:x0")
    with pytest.raises(ConfigError, match=r"error=2\.0"):
        open_seen(f"{base}?kind=bloom&error=2&prefix={unique_prefix()}")


def test_unreachable_server_is_store_unavailable_naming_it() -> None:
    from tests.seen.valkey_fixtures import free_port

    port = free_port()
    with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{port}"):
        open_seen(f"valkey://127.0.0.1:{port}/0?timeout=1")


# ---------------------------------------------------------------------- agreement


def test_later_clients_adopt_the_stored_sizes_and_refuse_other_ones(
    request: pytest.FixtureRequest,
) -> None:
    spec = valkey_spec(request, "valkey_server", "bloom", "&capacity=50000&error=0.01")
    base = spec.split("&capacity")[0]
    with open_seen(spec) as first:
        first.add("http://a.example/")
        config = dict(first.config)  # type: ignore[attr-defined]
    with open_seen(base) as second:  # no sizes given: adopts the stored ones
        assert second.config == config  # type: ignore[attr-defined]
        assert "http://a.example/" in second
    with pytest.raises(ConfigError, match="created with capacity=50000"):
        open_seen(base + "&capacity=60000")
    with pytest.raises(ConfigError, match="holds a kind=bloom store"):
        open_seen(base.replace("kind=bloom", "kind=exact"))
    with pytest.raises(ProfileMismatch, match="profile"):
        open_seen(base + "&profile=crawler")
    with pytest.raises(ProfileMismatch):
        open_seen(base, profile=CRAWLER)


def test_prefix_colliding_with_foreign_data_is_reported(
    valkey_server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    spec = valkey_spec(request, "valkey_server", "exact")
    prefix = spec.split("prefix=")[1].split("&")[0]
    with valkey_server.client() as c:
        c.set(f"{{{prefix}}}:meta", "not json")
    with pytest.raises(StoreCorrupt, match="not urlsieve metadata"):
        open_seen(spec)


def test_exact_keeps_intset_buckets_at_16_bytes_per_url_or_less(
    fresh_server: ServerProcess,
) -> None:
    n = 100_000
    with fresh_server.client() as c:
        before = int(c.info("memory")["used_memory"])
    spec = f"{fresh_server.url}?kind=exact&capacity={n}&prefix=mem"
    with open_seen(spec) as store:
        assert all(store.add_many(urls(n, "mem")))
        stats = store.stats()
    with fresh_server.client() as c:
        after = int(c.info("memory")["used_memory"])
        bucket = next(iter(c.scan_iter(match="{mem:x*}:[0-9]*", count=1000)))
        assert c.object("encoding", bucket) == b"intset"
    per_url = (after - before) / n
    assert per_url <= 16, f"{per_url:.1f} bytes per URL"
    assert stats.bytes_used / n <= 16


# ---------------------------------------------------------------------- cluster


@pytest.mark.parametrize("kind", KINDS)
def test_cluster_spreads_a_store_over_every_primary(
    valkey_cluster: Cluster, request: pytest.FixtureRequest, kind: str
) -> None:
    query = "&capacity=20000" + ("&leaf_bits=65536" if kind == "dsbf" else "")
    spec = valkey_spec(request, "valkey_cluster", kind, query)
    prefix = spec.split("prefix=")[1].split("&")[0]
    batch = urls(20_000, "spread")
    with open_seen(spec) as store:
        assert store.stats().extra["cluster"] is True
        store.add_many(batch)
        assert all(store.contains_many(batch))
    for node in valkey_cluster.nodes:
        with node.client() as c:
            assert any(c.scan_iter(match=f"{{{prefix}:*", count=1000)), f"{node.port} holds none"


# ---------------------------------------------------------------------- failures


def test_oom_refuses_writes_as_store_unavailable_and_writes_nothing(
    fresh_server: ServerProcess,
) -> None:
    for kind in KINDS:
        spec = f"{fresh_server.url}?kind={kind}&prefix=oom{kind}&capacity=10000"
        with open_seen(spec) as store:
            store.add_many(urls(100, "a"))
            count = len(store)
            with fresh_server.client() as c:
                c.config_set("maxmemory", "1")
            try:
                with pytest.raises(StoreUnavailable, match="out of memory"):
                    store.add_many(urls(100, "b"))
                assert all(store.contains_many(urls(100, "a")))  # reads still work
            finally:
                with fresh_server.client() as c:
                    c.config_set("maxmemory", "0")
            assert len(store) == count
            assert not any(store.contains_many(urls(100, "b")))


def test_read_only_replica_refuses_writes_as_store_unavailable(
    fresh_server: ServerProcess, tmp_path: Path
) -> None:
    replica = start_server(tmp_path / "replica")
    try:
        with open_seen(f"{replica.url}?kind=exact&prefix=ro") as store:
            store.add("http://before.example/")
            with replica.client() as c:
                c.execute_command("REPLICAOF", "127.0.0.1", fresh_server.port)
            with pytest.raises(StoreUnavailable, match="read-only replica"):
                store.add("http://after.example/")
    finally:
        replica.stop()


def test_timeout_is_store_unavailable_and_the_outcome_is_marked_unknown(
    fresh_server: ServerProcess,
) -> None:
    spec = f"{fresh_server.url}?kind=exact&prefix=slow&timeout=0.3&retries=0"
    with open_seen(spec) as store:
        store.add("http://warm.example/")
        with fresh_server.client() as c:
            c.execute_command("CLIENT", "PAUSE", 1500, "ALL")
        with pytest.raises(BatchInterrupted, match="Timeout") as info:
            store.add_many(["http://a.example/", "http://b.example/"])
        assert info.value.confirmed == [None, None]  # never "new" without the server's word
        with pytest.raises(StoreUnavailable):
            store.contains_many(["http://a.example/"])


def test_lost_server_fails_writes_retries_reads_and_keeps_acknowledged_urls(
    fresh_server: ServerProcess,
) -> None:
    acknowledged = urls(3000, "ack")
    spec = f"{fresh_server.url}?kind=exact&prefix=lost&retries=10&timeout=2"
    with open_seen(spec) as store:
        assert all(store.add_many(acknowledged))
        fresh_server.kill()
        with pytest.raises(BatchInterrupted) as info:
            store.add_many(urls(10, "x"))
        assert set(info.value.confirmed) == {None}
        # A read waits out a restart with backoff (restart started while it retries).
        restarter = threading.Timer(0.2, fresh_server.start)
        restarter.start()
        try:
            assert all(store.contains_many(acknowledged))  # survived SIGKILL via the AOF
        finally:
            restarter.join()
        assert not any(store.add_many(acknowledged))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_survives_a_server_crash(fresh_server: ServerProcess, kind: str) -> None:
    spec = f"{fresh_server.url}?kind={kind}&prefix=crash&capacity=20000&leaf_bits=65536"
    if kind != "dsbf":
        spec = spec.replace("&leaf_bits=65536", "")
    batch = urls(20_000, "crash")
    with open_seen(spec) as store:
        store.add_many(batch)
        count = len(store)
    fresh_server.kill()
    fresh_server.start()
    with open_seen(spec) as store:
        assert all(store.contains_many(batch))
        assert len(store) == count


def test_wrong_type_under_a_store_key_is_store_corrupt(
    valkey_server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    spec = valkey_spec(request, "valkey_server", "bloom", "&capacity=1000&blocks=1")
    prefix = spec.split("prefix=")[1].split("&")[0]
    with open_seen(spec) as store:
        with valkey_server.client() as c:
            c.sadd(f"{{{prefix}:b0}}", "x")
        with pytest.raises(StoreCorrupt, match="another type"):
            store.add("http://a.example/")


def test_driver_is_valkey_py_with_c_parser() -> None:
    """The speed claims assume libvalkey; the [valkey] extra installs it."""
    from valkey.utils import LIBVALKEY_AVAILABLE

    assert LIBVALKEY_AVAILABLE
