"""Seed 002's bitmap store: layout, errors, false-positive floor, processes and crashes."""

from __future__ import annotations

import errno
import hashlib
import math
import multiprocessing
import os
import random
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from tests.seen.test_contract import urls
from urlsieve import (
    CRAWLER,
    ConfigError,
    ProfileMismatch,
    StoreCorrupt,
    StoreError,
    StoreFull,
    StoreReadOnly,
    canonicalize,
)
from urlsieve.seen import open_seen
from urlsieve.seen.bitmap import BitmapStore, false_positive_floor
from urlsieve.store.files import os_error

ROOT = Path(__file__).resolve().parents[2]


def bit_is_set(path: Path, bit: int) -> bool:
    data = path.read_bytes()
    return bool(data[bit >> 3] & (1 << (bit & 7)))


def test_crc32_layout_is_the_patents_256_files_of_2mb(tmp_path: Path) -> None:
    url = "http://Example.com/a/../b"
    with open_seen(f"bitmap:{tmp_path}") as store:
        assert store.add(url) is True
        stats = store.stats()
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != "bitmap.hdr")
    assert names == [f"{i:02X}" for i in range(256)]
    assert {(tmp_path / n).stat().st_size for n in names} == {2 * 1024 * 1024}
    crc = zlib.crc32(canonicalize(url).encode())
    assert bit_is_set(tmp_path / f"{crc >> 24:02X}", crc & 0xFFFFFF)
    assert stats.extra["signature"] == "crc32"
    assert stats.extra["width"] == 32
    assert stats.capacity == 2**32


@pytest.mark.parametrize(("kind", "digest"), [("md5", hashlib.md5), ("sha1", hashlib.sha1)])
def test_long_signatures_use_directory_levels_and_the_leading_width_bits(
    tmp_path: Path, kind: str, digest: type
) -> None:
    url = "http://example.org/x?y=1"
    with open_seen(f"bitmap:{tmp_path}?signature={kind}&width=30") as store:
        store.add(url)
        assert store.stats().extra["file_bytes"] == 2**14 // 8
    value = int.from_bytes(digest(canonicalize(url).encode()).digest()[:4], "big") >> 2
    first, second, bit = value >> 22, (value >> 14) & 0xFF, value & (2**14 - 1)
    path = tmp_path / f"{first:02X}" / f"{second:02X}"
    assert bit_is_set(path, bit)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "bitmap.hdr"]
    assert files == [path]  # three-level files are created on first write only


def test_reopen_takes_parameters_from_the_header_and_refuses_contradictions(
    tmp_path: Path,
) -> None:
    with open_seen(f"bitmap:{tmp_path}?signature=sha1&width=24") as store:
        store.add("http://a.example/")
    with open_seen(f"bitmap:{tmp_path}") as store:
        assert store.stats().extra["signature"] == "sha1"
        assert "http://a.example/" in store
    with pytest.raises(ConfigError, match="signature=sha1, not md5"):
        open_seen(f"bitmap:{tmp_path}?signature=md5")
    with pytest.raises(ConfigError, match="width=24, not 28"):
        open_seen(f"bitmap:{tmp_path}?width=28")
    with pytest.raises(ProfileMismatch, match="filter/1"):
        open_seen(f"bitmap:{tmp_path}?profile=crawler")
    with pytest.raises(ProfileMismatch):
        BitmapStore(str(tmp_path), profile=CRAWLER)


def test_bad_parameters_fail_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown signature 'xxh64'"):
        open_seen(f"bitmap:{tmp_path}?signature=xxh64")
    with pytest.raises(ConfigError, match=r"width=40 is out of range for crc32 \(choose 16..32\)"):
        open_seen(f"bitmap:{tmp_path}?width=40")
    with pytest.raises(ConfigError, match="needs a directory"):
        open_seen("bitmap:")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(StoreCorrupt, match="not a bitmap store"):
        open_seen(f"bitmap:{tmp_path / 'other'}")


def test_losing_the_race_to_create_the_store_opens_the_winners_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two processes open a fresh directory at once: both see no header; one links its
    # header first and creates the 256 data files; the other then lists the directory.
    # The loser must open the winner's store, not call the winner's files strays.
    spec = f"bitmap:{tmp_path}?width=20"
    with open_seen(spec) as winner:
        winner.add_many(urls(50))
    header = tmp_path / "bitmap.hdr"
    real_exists = Path.exists
    missed: list[Path] = []

    def exists_late(self: Path, *args: object, **kwargs: object) -> bool:
        if self == header and not missed:
            missed.append(self)
            return False  # what the loser saw just before the winner linked its header
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists_late)
    with open_seen(spec) as loser:
        assert missed == [header]
        assert all(loser.contains_many(urls(50)))
        assert len(loser) == 50


def _make(tmp_path: Path) -> Path:
    with open_seen(f"bitmap:{tmp_path}?width=20") as store:
        store.add_many(urls(100))
    return tmp_path / "bitmap.hdr"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(b"garbage" * 30), "bad magic"),
        (lambda p: p.write_bytes(p.read_bytes()[:100]), "truncated bitmap header"),
        (lambda p: p.write_bytes(p.read_bytes()[:-8]), "expected"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:20] + b"X" + p.read_bytes()[21:]),
            "checksum mismatch",
        ),
    ],
    ids=["magic", "short", "counters-cut", "flipped-byte"],
)
def test_damaged_header_is_store_corrupt(tmp_path: Path, damage: object, message: str) -> None:
    header = _make(tmp_path)
    damage(header)  # type: ignore[operator]
    with pytest.raises(StoreCorrupt, match=message):
        open_seen(f"bitmap:{tmp_path}")


def test_truncated_data_file_is_store_corrupt(tmp_path: Path) -> None:
    _make(tmp_path)
    victim = max((p for p in tmp_path.iterdir() if p.name != "bitmap.hdr"), key=lambda p: p.name)
    with open(victim, "r+b") as fh:
        fh.truncate(10)
    with pytest.raises(StoreCorrupt, match=f"{victim.name}: bitmap file is 10 bytes"):
        open_seen(f"bitmap:{tmp_path}")


def test_readonly_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    batch = urls(500)
    with open_seen(f"bitmap:{tmp_path}?width=20") as store:
        store.add_many(batch)
    with open_seen(f"bitmap:{tmp_path}?readonly=1") as store:
        assert all(store.contains_many(batch))
        with pytest.raises(StoreReadOnly, match="read-only"):
            store.add("http://new.example/")
        with pytest.raises(StoreReadOnly):
            store.add_many(["http://new.example/"])
    with pytest.raises(StoreError, match="no bitmap store here"):
        open_seen(f"bitmap:{tmp_path / 'absent'}?readonly=1")


@pytest.mark.parametrize(
    ("err", "cls", "hint"),
    [
        (errno.EACCES, StoreReadOnly, "readonly=1"),
        (errno.EROFS, StoreReadOnly, "readonly=1"),
        (errno.ENOSPC, StoreFull, "free disk space"),
        (errno.EDQUOT, StoreFull, "free disk space"),
        (errno.EIO, StoreError, "Input/output error"),
    ],
)
def test_os_errors_become_typed_store_errors(err: int, cls: type, hint: str) -> None:
    # Root ignores permissions, so the translation is checked on the errors themselves.
    error = OSError(err, os.strerror(err))
    with pytest.raises(cls, match=hint) as info:
        raise os_error(error, "/srv/seen/bitmap.hdr", "opening") from error
    assert str(info.value).startswith("/srv/seen/bitmap.hdr: ")
    assert "while opening" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_full_disk_is_store_full_and_nothing_is_half_written(tmp_path: Path) -> None:
    # A file-size cap (RLIMIT_FSIZE) stands in for a full disk: allocation fails with EFBIG.
    script = textwrap.dedent(
        f"""
        import resource, signal
        from urlsieve import StoreFull
        from urlsieve.seen import open_seen
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            open_seen({"bitmap:" + str(tmp_path / "bm")!r})
        except StoreFull as exc:
            print("StoreFull:", exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.startswith("StoreFull:"), out.stdout + out.stderr
    assert "no space left" in out.stdout
    assert "free disk space" in out.stdout
    assert StoreFull.__module__ == "urlsieve.exceptions"


@pytest.mark.parametrize(("kind", "width"), [("crc32", 16), ("md5", 24)])
def test_false_positive_floor_matches_one_minus_exp(kind: str, width: int, tmp_path: Path) -> None:
    # Seed 002's floor, 1 - e^(-n/2^w), measured at a scaled-down width so it runs fast:
    # at w=16 and n=2^15 the floor is 39 %, at w=24 and n=2^14 it is 0.098 %.
    n = 2**15 if width == 16 else 2**14
    probes = 20_000 if width == 16 else 100_000
    expected = false_positive_floor(n, width)
    rnd = random.Random(width)
    added = [f"http://h{i % 977}.example/{rnd.random():.17f}/{i}" for i in range(n)]
    fresh = [f"http://f{i % 911}.example/{rnd.random():.17f}/p{i}" for i in range(probes)]
    with open_seen(f"bitmap:{tmp_path}?signature={kind}&width={width}") as bm:
        for start in range(0, n, 50_000):
            bm.add_many(added[start : start + 50_000])
        measured = sum(bm.contains_many(fresh)) / probes
        stats = bm.stats()
    sigma = math.sqrt(expected * (1 - expected) / probes)
    assert abs(measured - expected) < 5 * sigma, (measured, expected)
    # stats() reports the floor from the fill, and the collisions it implies so far.
    assert stats.false_positive_rate == pytest.approx(expected, rel=0.05)
    collisions = n - stats.count  # adds wrongly answered "seen" while filling
    assert abs(stats.expected_false_positives - collisions) < 5 * math.sqrt(collisions) + 1


# -- processes --------------------------------------------------------------------------


def _writer(spec: str, worker: int, per_worker: int, out: multiprocessing.Queue[int]) -> None:
    batch = [f"http://w{worker}.example/{i}" for i in range(per_worker)]
    with open_seen(spec) as store:
        new = 0
        for start in range(0, per_worker, 5000):
            new += sum(store.add_many(batch[start : start + 5000]))
    out.put(new)


@pytest.mark.slow
def test_four_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    # Width 22 (512 KB) keeps bytes and the 256 per-file counters hot between the processes.
    spec = f"bitmap:{tmp_path}?width=22"
    per_worker = 250_000
    open_seen(spec).close()
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[int] = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(spec, w, per_worker, queue)) for w in range(4)]
    for p in procs:
        p.start()
    reported_new = sum(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
        assert p.exitcode == 0
    with open_seen(spec) as store:
        for w in range(4):
            batch = [f"http://w{w}.example/{i}" for i in range(per_worker)]
            assert all(store.contains_many(batch)), f"worker {w} lost a bit"
        # Every "new" any process was told is counted exactly once: no lost counter update.
        assert len(store) == reported_new
        # And the number of set bits is the number of "new" answers: no bit set twice as new.
        bits = 0
        for path in tmp_path.iterdir():
            if path.name != "bitmap.hdr":
                bits += sum(bin(b).count("1") for b in path.read_bytes())
        assert bits == reported_new
