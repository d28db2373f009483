"""The storage floor (``urlsieve.store``): one spec grammar and registry, one atomic write,
one SQLite and one Valkey connector, each turning what goes wrong into the same store errors.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import ServerProcess, start_server
from urlsieve.exceptions import (
    ConfigError,
    LearnError,
    QueueCorrupt,
    QueueUnavailable,
    SnapshotError,
    SpoolCorrupt,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
    StoreUnavailable,
)
from urlsieve.store import Backend, Registry
from urlsieve.store import sqlite as sqlite_store
from urlsieve.store import valkey as valkey_store
from urlsieve.store.files import file_lock, write_atomic

# ---------------------------------------------------------------------- errors


def test_the_learners_errors_are_store_errors_too() -> None:
    """``except StoreUnavailable`` catches every store that cannot be reached, and the
    learner's old names keep working for code that catches them."""
    assert issubclass(QueueUnavailable, StoreUnavailable) and issubclass(
        QueueUnavailable, LearnError
    )
    assert issubclass(QueueCorrupt, StoreCorrupt) and issubclass(QueueCorrupt, LearnError)
    assert issubclass(SpoolCorrupt, StoreCorrupt) and issubclass(SpoolCorrupt, LearnError)


# ---------------------------------------------------------------------- registry


class Thing:
    def __init__(self, location: str, *, size: int = 1, fast: bool = False) -> None:
        self.location, self.size, self.fast = location, size, fast


REGISTRY: Registry[Thing] = Registry(
    "thing spec",
    {
        "thing": Backend(f"{__name__}:Thing", {"size": int, "fast": bool}),
        "valkey": Backend(f"{__name__}:Thing", {"size": int}, server=True),
        "broken": Backend("urlsieve_no_such_module:X", {}, extra="valkey"),
    },
)


def test_a_registry_casts_each_parameter_to_its_declared_type() -> None:
    thing = REGISTRY.open("THING:/var/x?size=1e3&fast=yes")
    assert (thing.location, thing.size, thing.fast) == ("/var/x", 1000, True)
    assert REGISTRY.open("thing:x?size=2", size=5).size == 5  # keyword overrides win
    assert REGISTRY.open("valkey://h:1/0?size=3").location == "valkey://h:1/0"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nothing", "has no backend"),
        ("other:x", r"unknown thing backend 'other' in 'other:x' \(known: broken, thing, valkey\)"),
        ("thing:x?size=ten", "parameter size='ten' is not a valid int"),
        ("thing:x?fast=maybe", "parameter fast='maybe' is not a valid bool"),
        ("thing:x?colour=red", r"unknown parameter 'colour' for thing \(allowed: fast, size\)"),
        ("thing:x?size=1&size=2", "given twice"),
        ("valkey:localhost", "write valkey://host:port/db"),
        ("broken:x", r"cannot be loaded: .*pip install 'urlsieve\[valkey\]'"),
    ],
)
def test_a_bad_spec_says_what_and_where(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        REGISTRY.open(spec)


def test_a_backend_registered_later_is_opened() -> None:
    registry: Registry[Thing] = Registry("thing spec", {})
    registry.register("Mine", Backend(f"{__name__}:Thing", {}))
    assert "mine" in registry and registry.open("mine:here").location == "here"


# ---------------------------------------------------------------------- files


def test_write_atomic_replaces_the_file_whole_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "list.txt"
    target.write_text("old\n")
    write_atomic(target, "new ünïcode\n")
    assert target.read_text("utf-8") == "new ünïcode\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    write_atomic(target, memoryview(b"bytes"), mode=0o600)
    assert target.read_bytes() == b"bytes" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["list.txt"]


def test_write_atomic_that_cannot_write_keeps_the_old_file(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root writes anywhere: a directory that does not exist fails for everyone
        with pytest.raises(StoreError, match="no-such-dir"):
            write_atomic(tmp_path / "no-such-dir" / "f", b"x")
        return
    target = tmp_path / "f"
    target.write_bytes(b"old")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(StoreReadOnly, match="fix the permissions"):
            write_atomic(target, b"new")
    finally:
        tmp_path.chmod(0o700)
    assert target.read_bytes() == b"old"


def test_write_atomic_on_a_full_disk_is_store_full_and_keeps_the_old_file(tmp_path: Path) -> None:
    """A real full disk: /dev/full answers ENOSPC to every write, and the temporary file
    written there fails exactly so (Linux)."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")

    target = tmp_path / "f"
    target.write_bytes(b"old")
    real_fdopen = os.fdopen

    def fdopen_full(fd: int, *args: object, **kwargs: object) -> object:
        os.dup2(os.open("/dev/full", os.O_WRONLY), fd)
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fdopen", fdopen_full)
        with pytest.raises(StoreFull, match="no space left while writing"):
            write_atomic(target, b"new" * 100_000)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_snapshot_that_cannot_be_written_is_a_snapshot_error(tmp_path: Path) -> None:
    from urlsieve.match.snapshot import write_image

    with pytest.raises(SnapshotError, match="cannot write"):
        write_image(b"image", tmp_path / "missing" / "rules.snap")


def test_file_lock_serialises_holders(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "build.lock"
    with file_lock(lock) as fd:
        other = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
        assert fd >= 0
    with file_lock(lock, shared=True), file_lock(lock, shared=True):
        pass  # readers share


# ---------------------------------------------------------------------- SQLite


def test_sqlite_connect_sets_up_the_shared_database(tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "s.db", what="test store", timeout=3)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] == 3000
    assert db.isolation_level is None
    db.close()


def test_sqlite_errors_are_the_store_errors(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"not a database at all " * 100)
    with pytest.raises(StoreCorrupt, match=r"damaged\.db: not a test store database"):
        sqlite_store.connect(damaged, what="test store")
    with pytest.raises(QueueCorrupt) as found:
        sqlite_store.connect(damaged, what="learning queue", corrupt=QueueCorrupt)
    assert found.value.path == str(damaged)
    with pytest.raises(StoreUnavailable, match=r"test store .*missing"):
        sqlite_store.connect(tmp_path / "missing" / "s.db", what="test store")
    with pytest.raises(QueueUnavailable):
        sqlite_store.connect(
            tmp_path / "missing" / "s.db", what="queue", unavailable=QueueUnavailable
        )


def test_a_full_sqlite_database_is_store_full(tmp_path: Path) -> None:
    db = sqlite_store.connect(tmp_path / "s.db", what="test store")
    db.execute("CREATE TABLE t (v BLOB)")
    db.execute("PRAGMA max_page_count=8")
    with pytest.raises(sqlite3.Error) as raised:
        for _ in range(100):
            db.execute("INSERT INTO t VALUES (?)", (b"x" * 4000,))
    error = sqlite_store.sqlite_error(raised.value, tmp_path / "s.db", "adding", what="test store")
    assert isinstance(error, StoreFull) and "nothing was written" in str(error)


# ---------------------------------------------------------------------- Valkey


def test_valkey_connect_and_call_against_a_real_server(valkey_server: ServerProcess) -> None:
    client = valkey_store.connect(valkey_server.url, what="test store", timeout=2)
    assert valkey_store.call(client.ping, where=valkey_server.url, doing="PING") is True
    with pytest.raises(StoreError, match=r"NOSUCHCOMMAND|unknown command") as refused:
        valkey_store.call(
            lambda: client.execute_command("NOSUCHCOMMAND"), where="here", doing="a test"
        )
    assert not isinstance(refused.value, StoreUnavailable)
    with pytest.raises(LearnError, match="refused"):
        valkey_store.call(
            lambda: client.execute_command("NOSUCHCOMMAND"),
            where="here",
            doing="a test",
            refused=LearnError,
        )
    client.close()


def test_a_server_out_of_memory_is_unavailable_not_refused(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    try:
        client = valkey_store.connect(server.url, what="test store", timeout=2)
        with pytest.raises(StoreUnavailable, match=r"maxmemory.*retry later"):
            for i in range(2000):
                valkey_store.call(
                    lambda i=i: client.set(f"k{i}", b"x" * 4096), where=server.url, doing="SET"
                )
        with pytest.raises(QueueUnavailable):
            valkey_store.call(
                lambda: client.set("more", b"x" * 4096),
                where=server.url,
                doing="SET",
                unavailable=QueueUnavailable,
            )
        client.close()
    finally:
        server.stop()


def test_a_server_that_is_not_there_is_unavailable() -> None:
    client = valkey_store.connect("valkey://127.0.0.1:1/0", what="test store", timeout=0.5)
    with pytest.raises(StoreUnavailable, match=r"PING on 127\.0\.0\.1:1 failed"):
        valkey_store.call(client.ping, where="127.0.0.1:1", doing="PING")


@pytest.mark.parametrize(
    ("url", "message"),
    [("valkey://h:notaport/0", "bad server URL"), ("valkey://h:1/0", "timeout=0")],
)
def test_a_bad_server_url_is_a_config_error(url: str, message: str) -> None:
    timeout = 0 if "timeout" in message else 1
    with pytest.raises(ConfigError, match=message):
        valkey_store.connect(url, what="test store", timeout=timeout)


def test_server_urls_are_recognised() -> None:
    for url in ("valkey://h:1/0", "REDIS://h", "rediss://h:1", "valkeys://h", "unix:///s.sock"):
        assert valkey_store.is_server_url(url)
    for spec in ("valkey:h", "sqlite:/x", "/var/lib/v.db", "memory:"):
        assert not valkey_store.is_server_url(spec)
