"""exact: and bloom: beyond the contract: files, growth, and every kind of misuse."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from urlsieve import (
    CRAWLER,
    ConfigError,
    ProfileMismatch,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
)
from urlsieve.seen import open_seen
from urlsieve.seen.bloom import BloomStore, _block_mask, _masks
from urlsieve.seen.exact import ExactStore

KINDS = ["exact", "bloom"]


def urls(n: int, tag: str = "u") -> list[str]:
    return [f"http://{tag}{i % 1013}.example.org/item/{i}?v={i * 7919 % 10007}" for i in range(n)]


def make(kind: str, path: Path, *params: str, n: int = 2000) -> Path:
    query = "&".join(params)
    with open_seen(f"{kind}:{path}" + (f"?{query}" if query else "")) as store:
        store.add_many(urls(n))
        store.flush()
    return path


# ------------------------------------------------------------------ the files


@pytest.mark.parametrize("kind", KINDS)
def test_header_names_kind_and_profile(kind: str, tmp_path: Path) -> None:
    path = make(kind, tmp_path / "s", "profile=crawler")
    head = path.read_bytes()[:256]
    assert head.startswith(b"URLSIEVE" + kind.encode())
    assert b"crawler/" in head
    assert not list(tmp_path.glob("*.tmp"))  # creation leaves no temporary file behind


def test_exact_grows_into_a_new_file_and_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.exact"
    batch = urls(60_000)
    with ExactStore(str(path), capacity=100) as store:
        inode = path.stat().st_ino
        assert all(store.add_many(batch[:50_000]))
        for u in batch[50_000:]:
            assert store.add(u)
        assert path.stat().st_ino != inode  # replaced by rename
        assert len(store) == 60_000
        assert all(store.contains_many(batch))
        stats = store.stats()
        assert 8 <= stats.bytes_used / 60_000 <= 16
        assert stats.extra["expected_fingerprint_collisions"] < 1e-9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.exact"]


def test_two_handles_in_one_process_follow_each_others_growth(tmp_path: Path) -> None:
    spec = f"exact:{tmp_path}/s.exact?capacity=50"
    batch = urls(20_000)
    with open_seen(spec) as a, open_seen(spec) as b:
        for i in range(0, 20_000, 500):
            writer, reader = (a, b) if i % 1000 else (b, a)
            assert all(writer.add_many(batch[i : i + 250]))
            assert all(writer.add(u) for u in batch[i + 250 : i + 500])
            assert all(reader.contains_many(batch[: i + 500]))
        assert len(a) == len(b) == 20_000


def test_exact_fingerprint_zero_is_stored_as_one(tmp_path: Path) -> None:
    with ExactStore(str(tmp_path / "s")) as store:
        assert store.add_fingerprints(np.array([0, 1, 2], dtype=np.uint64)).tolist() == [
            True,
            False,
            True,
        ]
        assert store.contains_fingerprints([0, 1, 2, 3]).tolist() == [True, True, True, False]


def test_a_grower_killed_before_its_rename_is_recovered(tmp_path: Path) -> None:
    path = make("exact", tmp_path / "s.exact", "capacity=10", n=100)
    with ExactStore(str(path)) as store:
        store._mv[33] = 1  # retired, as a grower dying between marking and renaming leaves it
        (tmp_path / "s.exact.grow-999999.tmp").write_bytes(b"half a table")
        assert store.add("http://after.example/") is True
        assert all(store.contains_many(urls(100)))
        store.add_many(urls(5000, "more"))  # grows: the stale temporary file goes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.exact"]


def test_bloom_masks_match_between_single_and_batch_paths() -> None:
    rng = np.random.default_rng(5)
    h = rng.integers(0, 2**64 - 1, size=(200, 2), dtype=np.uint64, endpoint=True)
    for t in (1, 2):
        batch = _masks(h[:, 0].copy(), h[:, 1].copy(), t)
        for (h1, h2), row in zip(h.tolist(), batch, strict=True):
            as_int = sum(int(word) << (64 * w) for w, word in enumerate(row))
            assert as_int == _block_mask(h1, h2, t)
            assert bin(as_int).count("1") <= 8 * t


@pytest.mark.parametrize("error", [0.01, 1e-7])  # 8 and 16 bits per URL
def test_bloom_single_and_batch_paths_agree(tmp_path: Path, error: float) -> None:
    with BloomStore(str(tmp_path / "s"), capacity=3000, error=error) as store:
        assert store.stats().extra["layers"][0]["k"] == (8 if error > 1e-6 else 16)
        first, second = urls(3000, "a"), urls(3000, "b")
        for u in first:
            store.add(u)
        store.add_many(second)
        assert all(store.contains_many(first))
        assert all(u in store for u in second)


def test_bloom_parameters_of_an_existing_file_win(tmp_path: Path) -> None:
    path = make("bloom", tmp_path / "s", "capacity=5000", "error=0.01")
    with open_seen(f"bloom:{path}") as store:
        assert store.stats().extra["error"] == 0.01
    with pytest.raises(ConfigError, match=r"created with capacity=5000 and error=0\.01"):
        open_seen(f"bloom:{path}?capacity=9000")


# -------------------------------------------------------------------- misuse


def mount_tmpfs(where: Path) -> Path:
    """Mount a 1 MiB tmpfs at ``where`` (root only: skips where mounting is not allowed)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    return where


@pytest.mark.parametrize("kind", KINDS)
def test_not_a_store(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello\n" * 1000)
    with pytest.raises(StoreCorrupt, match=r"not a urlsieve store .*pass another path"):
        open_seen(f"{kind}:{path}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("size", [0, 100, 4096, -64])
def test_truncated(kind: str, size: int, tmp_path: Path) -> None:
    path = make(kind, tmp_path / "s")
    full = path.stat().st_size
    os.truncate(path, size if size >= 0 else full + size)
    with pytest.raises(StoreCorrupt, match=r"truncated .*restore it from a backup or delete it"):
        open_seen(f"{kind}:{path}")


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_header(kind: str, tmp_path: Path) -> None:
    path = make(kind, tmp_path / "s")
    data = bytearray(path.read_bytes())
    data[100] ^= 0x40  # inside the parameters
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match="header checksum mismatch"):
        open_seen(f"{kind}:{path}")


def test_damaged_bloom_layer_table(tmp_path: Path) -> None:
    path = make("bloom", tmp_path / "s")
    data = bytearray(path.read_bytes())
    data[512 + 8] ^= 1  # layer 0: number of blocks
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match="layer 0 descriptor is damaged"):
        open_seen(f"bloom:{path}")
    struct.pack_into("<Q", data, 35 * 8, 10**6)  # layer count
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match="layer count 1000000 is impossible"):
        open_seen(f"bloom:{path}")


def test_newer_format_version(tmp_path: Path) -> None:
    import zlib

    path = make("exact", tmp_path / "s")
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 16, 99)
    struct.pack_into("<I", data, 252, zlib.crc32(bytes(data[:252])))
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match=r"format version 99 .*reads 1"):
        open_seen(f"exact:{path}")


def test_wrong_kind(tmp_path: Path) -> None:
    path = make("exact", tmp_path / "s")
    with pytest.raises(
        StoreCorrupt, match=r"holds an? 'exact' store, not 'bloom': open it as 'exact:'"
    ):
        open_seen(f"bloom:{path}")


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_profile(kind: str, tmp_path: Path) -> None:
    path = make(kind, tmp_path / "s", "profile=crawler")
    with pytest.raises(ProfileMismatch, match=r"'crawler/\d+', opened with 'filter/\d+'.*profile="):
        open_seen(f"{kind}:{path}")
    with open_seen(f"{kind}:{path}", profile=CRAWLER) as store:
        assert all(store.contains_many(urls(2000)))


@pytest.mark.parametrize("kind", KINDS)
def test_read_only(kind: str, tmp_path: Path) -> None:
    path = make(kind, tmp_path / "s")
    before = path.read_bytes()
    with open_seen(f"{kind}:{path}?readonly=1") as store:
        assert all(store.contains_many(urls(2000)))
        assert urls(1)[0] in store
        assert len(store) > 1900
        for write in (
            lambda: store.add("http://new.example/"),
            lambda: store.add_many(["http://new.example/"]),
        ):
            with pytest.raises(StoreReadOnly, match="open it without readonly to add URLs"):
                write()
        store.flush()
    assert path.read_bytes() == before
    with pytest.raises(StoreError, match=r"no .* store there; open it once without"):
        open_seen(f"{kind}:{tmp_path}/missing?readonly=1")


def test_unwritable_file_says_readonly(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root ignores permissions: use a file system mounted read-only
        where = mount_tmpfs(tmp_path / "mnt")
        try:
            path = make("exact", where / "s")
            subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
            with pytest.raises(StoreReadOnly, match=r"Read-only file system.*\?readonly=1"):
                open_seen(f"exact:{path}")
            with open_seen(f"exact:{path}?readonly=1") as store:
                assert all(store.contains_many(urls(2000)))
        finally:
            subprocess.run(["umount", "-l", str(where)], check=True)
    else:
        path = make("exact", tmp_path / "s")
        path.chmod(0o444)
        with pytest.raises(StoreReadOnly, match=r"Permission denied.*\?readonly=1"):
            open_seen(f"exact:{path}")


@pytest.mark.parametrize("kind", KINDS)
def test_closed_store_and_missing_directory(kind: str, tmp_path: Path) -> None:
    store = open_seen(f"{kind}:{tmp_path}/s")
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.add("http://a.example/")
    with pytest.raises(StoreError, match="does not exist; create it first"):
        open_seen(f"{kind}:{tmp_path}/no/such/dir/s")
    with pytest.raises(StoreError, match="needs a file path"):
        open_seen(f"{kind}:")


# ------------------------------------------------------------------ full disk


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root; the RLIMIT_FSIZE test covers full disks without it)."""
    mnt = mount_tmpfs(tmp_path / "mnt")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_full_tmpfs_creating_a_store(small_tmpfs: Path) -> None:
    with pytest.raises(StoreFull, match="no space left while creating the store"):
        open_seen(f"bloom:{small_tmpfs}/s?capacity=10000000")
    assert list(small_tmpfs.iterdir()) == []


def test_full_tmpfs_growing_keeps_what_was_added(small_tmpfs: Path) -> None:
    added: list[str] = []
    with open_seen(f"exact:{small_tmpfs}/s?capacity=100") as store:
        with pytest.raises(StoreFull, match="nothing was added: free disk space"):
            for i in range(100):
                batch = urls(2000, f"b{i}-")
                store.add_many(batch)
                added += batch
        assert added
        assert len(store) == len(added)
        assert all(store.contains_many(added))
        assert not any(store.contains_many(batch))  # the failed batch added nothing
        with pytest.raises(StoreFull):
            store.add_many(batch)
    assert [p.name for p in small_tmpfs.iterdir()] == ["s"]


_RLIMIT_CHILD = """
import json, resource, signal, sys
from urlsieve import StoreFull
from urlsieve.seen import open_seen
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
kind, path = sys.argv[1], sys.argv[2]
added = 0
store = open_seen(f"{kind}:{path}?capacity=1000")
try:
    for i in range(200):
        store.add_many([f"http://x{i}.example/{j}" for j in range(1000)])
        added += 1000
except StoreFull as exc:
    print(json.dumps({"added": added, "error": str(exc)}))
"""


@pytest.mark.parametrize("kind", KINDS)
def test_file_size_limit_is_a_full_store(kind: str, tmp_path: Path) -> None:
    path = tmp_path / f"s-{uuid.uuid4().hex}"
    out = subprocess.run(
        [sys.executable, "-c", _RLIMIT_CHILD, kind, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout)
    assert "File too large" in result["error"]
    assert result["added"] > 0
    with open_seen(f"{kind}:{path}") as store:
        for i in range(result["added"] // 1000):
            assert all(store.contains_many([f"http://x{i}.example/{j}" for j in range(1000)]))


def test_bloom_batch_after_the_last_layer_filled_exactly(tmp_path: Path) -> None:
    # A batch that arrives when the last layer is exactly full must still be tested
    # against that layer before a new one is added.
    batch = [f"http://full.example/{i}" for i in range(10)]
    with open_seen(f"bloom:{tmp_path}/s.bloom?capacity=10&error=0.01") as store:
        assert store.add_many(batch) == [True] * 10
        assert store.add_many(batch) == [False] * 10
        assert [store.add(u) for u in batch[:3]] == [False] * 3
        assert len(store) == 10
        assert store.add_many([*batch, "http://full.example/new"]) == [False] * 10 + [True]


def test_bloom_opened_while_another_process_adds_a_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race: the opener maps the file at its size, then another writer reserves
    # space and publishes a layer before the opener reads the layer table.
    spec = f"bloom:{tmp_path}/s.bloom?capacity=10&error=0.01"
    first = [f"http://race.example/{i}" for i in range(10)]
    more = [f"http://race.example/more/{i}" for i in range(10)]
    with open_seen(spec) as store:
        store.add_many(first)
    one_layer = (tmp_path / "s.bloom").stat().st_size
    with open_seen(spec) as store:
        store.add_many(more)  # grows: a second layer
    assert (tmp_path / "s.bloom").stat().st_size > one_layer

    real_fstat = os.fstat
    stale = {"left": 1}

    def fstat(fd: int) -> os.stat_result:
        result = real_fstat(fd)
        if stale["left"] and sys._getframe(1).f_code.co_name == "_map":
            stale["left"] -= 1
            fields = list(result)
            fields[6] = one_layer  # st_size as it was before the layer was published
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(os, "fstat", fstat)
    with open_seen(spec) as store:  # no false "truncated" error
        assert stale["left"] == 0
        assert all(store.contains_many(first + more))
        assert store.add_many(more) == [False] * 10
