"""The near-duplicate index: one contract over every backend, exactness against brute force,
the shared file's crash and corruption handling, and specs."""

from __future__ import annotations

import math
import multiprocessing
import os
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.seen.valkey_fixtures import Cluster, ServerProcess, drop_prefix, unique_prefix
from urlsieve.exceptions import ConfigError, StoreClosed, StoreCorrupt
from urlsieve.neardup.index import (
    MAX_KEY,
    FileIndex,
    MemoryIndex,
    NearDupIndex,
    ValkeyIndex,
    open_index,
)
from urlsieve.neardup.simhash import hamming, simhash

Opener = Callable[..., NearDupIndex]


@pytest.fixture(params=["memory", "file", "valkey", "valkey-cluster"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    kind = request.param
    if kind == "memory":
        yield lambda k=3: open_index("memory:", k=k)
    elif kind == "file":
        yield lambda k=3: open_index(f"file:{tmp_path}/nd.log", k=k)
    else:
        target: ServerProcess | Cluster = request.getfixturevalue(
            "valkey_server" if kind == "valkey" else "valkey_cluster"
        )
        prefix = unique_prefix()
        yield lambda k=3: open_index(f"{target.url}?prefix={prefix}", k=k)
        drop_prefix(target.nodes if isinstance(target, Cluster) else [target], prefix)


def _flip(fp: int, bits: int, rnd: random.Random) -> int:
    for bit in rnd.sample(range(64), bits):
        fp ^= 1 << bit
    return fp


def test_backend_satisfies_the_protocol(opener: Opener) -> None:
    with opener() as index:
        assert isinstance(index, NearDupIndex)
        assert len(index) == 0
        assert index.query(12345) == []


def test_query_finds_exactly_the_keys_within_k(opener: Opener) -> None:
    rnd = random.Random(3)
    base = rnd.getrandbits(64)
    with opener() as index:
        index.add("http://a.test/same", base)
        for bits in range(1, 7):
            index.add(f"http://a.test/d{bits}", _flip(base, bits, rnd))
        index.add_many(
            [f"http://far.test/{i}" for i in range(50)], [rnd.getrandbits(64) for _ in range(50)]
        )
        assert len(index) == 57
        found = index.query(base)
        assert found == [
            ("http://a.test/same", 0),
            ("http://a.test/d1", 1),
            ("http://a.test/d2", 2),
            ("http://a.test/d3", 3),
        ]
        assert index.query(base, 1) == found[:2]
        assert index.query_many([base, _flip(base, 64, rnd)], 0) == [[found[0]], []]
        with pytest.raises(ValueError, match=r"outside 0\.\.3"):
            index.query(base, 4)


def test_keys_of_any_text_and_repeated_keys(opener: Opener) -> None:
    with opener() as index:
        odd = "http://ü.test/\udcff?x=\x00"
        index.add(odd, 1)
        index.add(odd, 1 | 1 << 40)  # the page changed a little: both fingerprints kept
        assert index.query(1) == [(odd, 0), (odd, 1)]
        with pytest.raises(ValueError, match="over 8,192"):
            index.add("x" * (MAX_KEY + 1), 5)
        with pytest.raises(ValueError, match="2 keys but 1"):
            index.add_many(["a", "b"], [1])
        index.add_many([], [])


def test_persistent_backends_keep_what_was_added(opener: Opener) -> None:
    with opener() as index:
        index.add("http://kept.test/", 99)
        index.flush()
        persistent = not isinstance(index, MemoryIndex)
    if persistent:
        with opener() as again:
            assert again.query(99) == [("http://kept.test/", 0)]
            assert len(again) == 1
        with pytest.raises(ConfigError, match=r"k=3.*not k=2"):
            opener(2)


def test_closed_index_refuses(opener: Opener) -> None:
    index = opener()
    index.close()
    index.close()
    with pytest.raises(StoreClosed):
        index.query(1)
    with pytest.raises(StoreClosed):
        index.add("a", 1)


@pytest.mark.parametrize(
    ("k", "blocks"), [(0, None), (1, None), (2, None), (3, None), (5, None), (3, 6), (5, 7), (6, 8)]
)
def test_equals_brute_force_on_controlled_flips(k: int, blocks: int | None) -> None:
    rnd = random.Random(k)
    fps = [rnd.getrandbits(64) for _ in range(300)]
    fps += [_flip(rnd.choice(fps), rnd.randint(0, k + 2), rnd) for _ in range(700)]
    index = MemoryIndex(k=k, blocks=blocks)
    assert len(index.layout.tables) == math.comb(blocks or k + 1, (blocks or k + 1) - k)
    index.add_many([f"d{i}" for i in range(len(fps))], fps)
    queries = [*rnd.sample(fps, 200), *(rnd.getrandbits(64) for _ in range(50))]
    expected = [
        sorted(
            ((f"d{i}", hamming(q, fp)) for i, fp in enumerate(fps) if hamming(q, fp) <= k),
            key=lambda m: (m[1], m[0]),
        )
        for q in queries
    ]
    assert [index.query(q) for q in queries] == expected  # recall 1.0 and precision 1.0
    assert index.query_many(queries) == expected  # the vectorised batch path, the same
    index.add("late", queries[0])  # the batch path's sorted tables are rebuilt after an add
    assert ("late", 0) in index.query_many(queries)[0]


def test_equals_brute_force_on_near_duplicate_texts() -> None:
    rnd = random.Random(11)
    vocab = [f"v{i}" for i in range(3000)]
    docs = []
    for _ in range(120):
        words = [rnd.choice(vocab) for _ in range(250)]
        docs.append(words)
        for edits in (1, 2, 5, 20):  # edit distance controlled, in words
            copy = list(words)
            for _ in range(edits):
                copy[rnd.randrange(len(copy))] = rnd.choice(vocab)
            docs.append(copy)
    fps = [simhash(" ".join(d)) for d in docs]
    index = MemoryIndex(k=3)
    index.add_many([str(i) for i in range(len(fps))], fps)
    near_pairs = 0
    for q in fps:
        brute = {str(j) for j, fp in enumerate(fps) if hamming(q, fp) <= 3}
        assert {key for key, _ in index.query(q)} == brute
        near_pairs += len(brute) - 1
    assert near_pairs > 300  # the one- and two-word edits are mostly within 3 bits


def _append(path: str, start: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with FileIndex(path) as index:
        for i in range(start, start + 500, 50):
            index.add_many([f"p{j}" for j in range(i, i + 50)], list(range(i, i + 50)))
        index.flush()
        out.put(len(index))


def test_file_index_is_shared_by_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "nd.log")
    reader = FileIndex(path)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_append, args=(path, n * 1000, queue)) for n in range(4)]
    for proc in procs:
        proc.start()
    counts = [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert max(counts) == 2000
    assert len(reader) == 2000  # the reader replays what the writers appended
    assert reader.query(3007, 0) == [("p3007", 0)]
    reader.close()


def test_a_torn_last_record_is_ignored_then_cut(tmp_path: Path) -> None:
    path = tmp_path / "nd.log"
    with FileIndex(path) as index:
        index.add_many(["a", "b"], [1, 2])
    good = path.stat().st_size
    with path.open("ab") as raw:  # a writer killed mid-record
        raw.write(struct.pack("<QI", 3, 10) + b"partial")
    with FileIndex(path) as index:
        assert len(index) == 2
        assert index.query(3) == [("a", 1), ("b", 1)]
        index.add("c", 3)
        assert path.stat().st_size == good + 12 + 1 + 4  # the torn tail was cut first
    with FileIndex(path) as index:
        assert index.query(3, 0) == [("c", 0)]


def test_corruption_and_foreign_files_are_typed_errors(tmp_path: Path) -> None:
    path = tmp_path / "nd.log"
    with FileIndex(path) as index:
        index.add_many(["a", "b", "c"], [1, 2, 3])
    data = bytearray(path.read_bytes())
    data[28 + 12] ^= 0xFF  # the first record's key byte
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match=r"checksum does not match at byte 28; .*truncate -s 28"):
        FileIndex(path)
    path.write_bytes(b"GIF89a" + b"\x00" * 100)
    with pytest.raises(StoreCorrupt, match="not a urlsieve near-duplicate index"):
        FileIndex(path)
    other = tmp_path / "huge.log"
    with FileIndex(other) as index:
        pass
    with other.open("ab") as raw:
        raw.write(struct.pack("<QI", 1, 1 << 30) + b"x" * 100)
    with pytest.raises(StoreCorrupt, match="a key length of 1,073,741,824"):
        FileIndex(other)


def test_file_shrinking_under_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "nd.log"
    index = FileIndex(path)
    index.add_many(["a", "b"], [1, 2])
    os.truncate(path, 28)
    with pytest.raises(StoreCorrupt, match="shrank"):
        index.query(1)
    index.close()


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_any_bytes_as_the_file_open_or_raise_typed_errors(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nd.log"
        # Half the examples start with a valid header, so the record parser is reached.
        head = struct.pack("<16sIII", b"urlsieve-nd-log\n", 1, 3, 4)
        path.write_bytes(head + data if data[:1] < b"\x80" else data)
        try:
            with FileIndex(path) as index:
                index.query(0)
                index.add("after", 5)
                assert ("after", 0) in index.query(5)
        except (StoreCorrupt, ConfigError):
            pass


def test_specs(tmp_path: Path, valkey_server: ServerProcess) -> None:
    assert isinstance(open_index("memory:?k=2"), MemoryIndex)
    assert open_index("memory:", k=1).k == 1
    with open_index(f"file:{tmp_path}/x.log?k=2") as index:
        assert isinstance(index, FileIndex) and index.k == 2
    with pytest.raises(ConfigError, match="built with blocks=3, not 5"):
        open_index(f"file:{tmp_path}/x.log?k=2&blocks=5")
    prefix = unique_prefix()
    with open_index(f"{valkey_server.url}?prefix={prefix}&k=2&timeout=2") as index:
        assert isinstance(index, ValkeyIndex) and index.k == 2
        index.add("a", 7)
    with pytest.raises(ConfigError, match="k=2, blocks=3, not k=2, blocks=5"):
        open_index(f"{valkey_server.url}?prefix={prefix}&k=2&blocks=5")
    with open_index(f"{valkey_server.url}?prefix={prefix}&k=2&blocks=3") as index:
        assert index.query(7) == [("a", 0)]
    drop_prefix([valkey_server], prefix)
    for spec, message in [
        ("mem:", "unknown near-duplicate index backend 'mem'"),
        ("memory:?k=x", "k='x' is not a valid int"),
        ("memory:?k=9", "k must be 0..8"),
        ("memory:?prefix=a", "unknown parameter 'prefix' for memory"),
        ("memory:?k=3&blocks=3", r"blocks must be 4\.\.64 for k=3"),
        ("memory:?k=8&blocks=20", "needs 125,970 tables"),
        ("file:", "write file:PATH"),
        ("valkey:localhost", "write valkey://host:port/db"),
        (f"{valkey_server.url}?prefix=a:b", "prefix='a:b': must be"),
    ]:
        with pytest.raises(ConfigError, match=message):
            open_index(spec)
