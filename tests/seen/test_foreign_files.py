"""Every file a store did not write is refused as StoreCorrupt (issue 9): another kind's
store, a snapshot, text, random bytes, an empty or truncated file, a header with absurd
parameters; and damage inside the data areas that would silently forget URLs is found."""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from urlsieve import ProfileMismatch, StoreCorrupt, StoreError
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import BLOCK, parse_rule
from urlsieve.seen import open_seen

FILE_KINDS = ["exact", "bloom", "buckets", "dsbf"]
URLS = [f"http://h{i}.example/p" for i in range(500)]


def _store_bytes(kind: str, directory: Path) -> bytes:
    path = directory / f"real.{kind}"
    with open_seen(f"{kind}:{path}") as store:
        store.add_many(URLS)
        store.flush()
    return path.read_bytes()


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    directory = tmp_path_factory.mktemp("foreign")
    files = {kind: _store_bytes(kind, directory) for kind in FILE_KINDS}
    compile_snapshot([parse_rule("a.example", BLOCK, "x")], directory / "r.snap")
    files["snapshot"] = (directory / "r.snap").read_bytes()
    files["empty"] = b""
    files["text"] = b"not a store\n" * 500
    files["random"] = random.Random(7).randbytes(9000)
    for kind in FILE_KINDS:
        data = files[kind]
        files[f"{kind}-half"] = data[: len(data) // 2]
        files[f"{kind}-100-bytes"] = data[:100]
        absurd = bytearray(data)
        absurd[88:120] = b"\xff" * 32  # parameters out of any range, with a valid checksum
        absurd[252:256] = struct.pack("<I", zlib.crc32(bytes(absurd[:252])))
        files[f"{kind}-absurd"] = bytes(absurd)
    return files


def _cases() -> Iterator[tuple[str, str]]:
    others = ["snapshot", "empty", "text", "random"]
    for kind in FILE_KINDS:
        for name in [*FILE_KINDS, *others]:
            if name != kind:
                yield kind, name
        for damage in ("half", "100-bytes", "absurd"):
            yield kind, f"{kind}-{damage}"


@pytest.mark.parametrize(("kind", "name"), list(_cases()))
def test_a_foreign_file_is_store_corrupt(
    kind: str, name: str, foreign: dict[str, bytes], tmp_path: Path
) -> None:
    path = tmp_path / "store"
    path.write_bytes(foreign[name])
    for readonly in ("", "?readonly=1"):
        with (
            pytest.raises(StoreCorrupt, match=str(path)),
            open_seen(f"{kind}:{path}{readonly}") as store,
        ):
            store.contains_many(URLS)


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_emptied_data_is_found_on_open(kind: str, tmp_path: Path) -> None:
    # The header kept its count while the data was zeroed (a disk or a tool gone wrong):
    # the store would answer "new" for every URL it holds, a crawler refetching forever.
    path = tmp_path / f"s.{kind}"
    path.write_bytes(_store_bytes(kind, tmp_path))
    data = bytearray(path.read_bytes())
    data[4096:] = bytes(len(data) - 4096)
    path.write_bytes(bytes(data))
    for readonly in ("", "?readonly=1"):
        with pytest.raises(StoreCorrupt, match="the data area is damaged"):
            open_seen(f"{kind}:{path}{readonly}")


def test_exact_finds_slots_filled_by_damage(tmp_path: Path) -> None:
    path = tmp_path / "s.exact"
    path.write_bytes(_store_bytes("exact", tmp_path))
    data = bytearray(path.read_bytes())
    data[-4096:] = random.Random(3).randbytes(4096)  # garbage where slots were empty
    path.write_bytes(bytes(data))
    with pytest.raises(StoreCorrupt, match=r"slots in use, the header counts 500"):
        open_seen(f"exact:{path}")


@pytest.mark.parametrize("kind", FILE_KINDS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=6000), keep=st.integers(0, 5000))
def test_any_bytes_as_a_store_file_open_or_are_refused(
    kind: str, tmp_path: Path, data: bytes, keep: int
) -> None:
    path = tmp_path / "fuzz"
    real = tmp_path / f"base.{kind}"
    if not real.exists():
        real.write_bytes(_store_bytes(kind, tmp_path))
    # Arbitrary bytes, and a real store's first bytes followed by arbitrary ones.
    for content in (data, real.read_bytes()[:keep] + data):
        path.write_bytes(content)
        try:
            with open_seen(f"{kind}:{path}?readonly=1") as store:
                store.contains_many(URLS[:10])
        except (StoreCorrupt, ProfileMismatch):
            pass
        except StoreError as exc:  # only the kinds above: anything else is a bug
            pytest.fail(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("content", [b"", b"x" * 100, random.Random(5).randbytes(4096)])
def test_a_foreign_bitmap_file_is_store_corrupt(content: bytes, tmp_path: Path) -> None:
    directory = tmp_path / "bm"
    with open_seen(f"bitmap:{directory}") as store:
        store.add_many(URLS)
    (directory / "07").write_bytes(content)
    with pytest.raises(StoreCorrupt, match="07"), open_seen(f"bitmap:{directory}") as store:
        store.contains_many(URLS)
