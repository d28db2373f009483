"""The WARC spool: round trips, rotation, the size bound, crash recovery (a real SIGKILL),
damaged segments, consumers that claim segments, and warcio reading what we write."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from urlsieve.exceptions import LearnError, SpoolCorrupt
from urlsieve.learn.page import Page
from urlsieve.learn.spool import (
    OPEN,
    READY,
    Spool,
    SpoolBusy,
    SpoolFull,
    claim_next,
    read_segment,
    ready_segments,
    recover_segment,
)


def _page(i: int = 0, body: bytes | None = None, **fields: object) -> Page:
    values: dict[str, object] = {
        "url": f"http://example.com/{i}",
        "final_url": f"http://example.com/{i}",
        "status": 200,
        "headers": (("Content-Type", "text/html; charset=utf-8"), ("Server", "t")),
        "body": f"<p>page {i}</p>".encode() if body is None else body,
        "fetched_at": 1_700_000_000.125 + i,
    }
    values.update(fields)
    return Page(**values)  # type: ignore[arg-type]


_WARCIO = (sys.executable, "-c", "import sys; from warcio.cli import main; sys.exit(main())")


def _all(directory: Path) -> list[Page]:
    return [page for seg in ready_segments(directory) for page in read_segment(seg)]


def test_round_trip_of_every_page_field(tmp_path: Path) -> None:
    odd = Page(
        url="http://start.example/a?x=1",
        final_url="https://final.example:8443/b",
        status=203,
        headers=(
            ("Content-Type", "text/html"),
            ("X-Odd", "caf\xe9 \xff\x80 value"),  # Latin-1 text of bytes that are not UTF-8
            ("Content-Encoding", "gzip"),
            ("Content-Length", "17"),
            ("Transfer-Encoding", "chunked"),
            ("X-Urlsieve-Original-Trap", "a header named like our renames"),
            ("X-Spaces", "  two leading spaces"),
            ("X-Empty", ""),
            ("content-length", "lower-case duplicate"),
        ),
        body=b"\xff\xfe\x00not utf-8 \xc3\x28 body\r\n\r\nWARC/1.1\r\n",
        fetched_at=1_763_000_000.123456,
        truncated=True,
        hops=("http://start.example/a?x=1", "https://final.example:8443/b"),
        queued_at=1_762_999_999.5,
        job="17:3 valkey|1763000000-0 %\r\n",  # a backend's key, any text
        note="cloaking: as 'x/1' \u8d4c 100% dirty\r\n",  # any text
    )
    empty = _page(1, body=b"", headers=(), queued_at=None)
    with Spool(tmp_path) as spool:
        spool.append(odd)
        spool.append(empty)
    assert _all(tmp_path) == [odd, empty]


def test_stored_http_headers_match_the_decoded_body(tmp_path: Path) -> None:
    page = _page(headers=(("Content-Encoding", "br"), ("Content-Length", "3")), body=b"x" * 50)
    with Spool(tmp_path) as spool:
        spool.append(page)
    (segment,) = ready_segments(tmp_path)
    with segment.open("rb") as fh:
        records = []
        for record in ArchiveIterator(fh):
            assert record.http_headers.get_header("Content-Encoding") is None
            assert record.http_headers.get_header("Content-Length") == "50"
            assert record.content_stream().read() == b"x" * 50
            records.append(record)
        assert len(records) == 1


def test_non_ascii_urls_are_escaped_not_lost(tmp_path: Path) -> None:
    page = _page(url="http://example.com/caf\xe9 x", final_url="http://example.com/\u4e2d")
    with Spool(tmp_path) as spool:
        spool.append(page)
    (back,) = _all(tmp_path)
    assert back.url == "http://example.com/caf%C3%A9%20x"
    assert back.final_url == "http://example.com/%E4%B8%AD"


def test_warcio_reads_every_closed_segment_and_checks_digests(tmp_path: Path) -> None:
    pages = [_page(i, body=os.urandom(3000) if i % 2 else None) for i in range(40)]
    with Spool(tmp_path, segment_bytes=20_000) as spool:
        spool.extend(pages[:10])
        for page in pages[10:]:
            spool.append(page)
    segments = ready_segments(tmp_path)
    assert len(segments) > 2
    uris = []
    for segment in segments:
        with segment.open("rb") as fh:
            for record in ArchiveIterator(fh, check_digests="raise"):
                assert record.rec_type == "response"
                assert record.http_headers.get_statuscode() == "200"
                uris.append(record.rec_headers.get_header("WARC-Target-URI"))
                record.content_stream().read()
    assert uris == [p.final_url for p in pages]
    for segment in segments:  # the command-line tools an operator would use
        out = subprocess.run(
            [*_WARCIO, "check", "-v", str(segment)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        index = subprocess.run(
            [*_WARCIO, "index", str(segment)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert index.stdout.count('"warc-type": "response"') >= 1


def test_rotation_names_and_order(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=2_000) as spool:
        for i in range(30):
            spool.append(_page(i, body=os.urandom(500)))
        spool.append(_page(30))
        assert list(tmp_path.glob("*" + OPEN))  # the last segment is still being written
    assert not list(tmp_path.glob("*" + OPEN))
    segments = ready_segments(tmp_path)
    assert len(segments) >= 5
    assert all(s.name.endswith(READY) for s in segments)
    assert [p.url for p in _all(tmp_path)] == [f"http://example.com/{i}" for i in range(31)]


def test_time_rotation_makes_a_lone_page_visible(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_seconds=0.01)
    spool.append(_page())
    assert ready_segments(tmp_path) == []
    import time

    time.sleep(0.02)
    spool.rotate_if_due()
    assert len(ready_segments(tmp_path)) == 1
    spool.close()


def test_max_bytes_refuses_until_consumed(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=1_000, max_bytes=5_000)
    written = 0
    with pytest.raises(SpoolFull, match="max_bytes=5000"):
        for i in range(100):
            spool.append(_page(i, body=os.urandom(800)))
            written += 1
    assert 4 <= written < 10
    assert isinstance(SpoolFull("x"), LearnError)
    spool.rotate()
    while (claim := claim_next(tmp_path)) is not None:
        list(claim.pages())
        claim.done()
    spool.append(_page(999))  # room again once the classifier consumed the segments
    spool.close()
    assert [p.url for p in _all(tmp_path)] == ["http://example.com/999"]


def test_one_writer_per_directory(tmp_path: Path) -> None:
    with Spool(tmp_path), pytest.raises(SpoolBusy):
        Spool(tmp_path)
    Spool(tmp_path).close()  # free again


_WRITER = textwrap.dedent(
    """
    import sys
    from urlsieve.learn.page import Page
    from urlsieve.learn.spool import Spool
    spool = Spool(sys.argv[1], segment_bytes=30_000)
    i = 0
    while True:
        spool.append(Page(f"http://example.com/{i}", f"http://example.com/{i}", 200,
                          (("Content-Type", "text/html"),), b"x" * (i % 5000), 1.0 + i))
        print(i, flush=True)
        i += 1
    """
)


def test_recovery_after_sigkill_loses_no_acknowledged_page(tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        acknowledged = -1
        for line in proc.stdout:
            acknowledged = int(line)
            if acknowledged >= 300:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert list(tmp_path.glob("*" + OPEN))  # killed with a segment open
    Spool(tmp_path).close()  # recovery on open
    assert not list(tmp_path.glob("*" + OPEN))
    pages = _all(tmp_path)
    urls = [p.url for p in pages]
    assert urls == [f"http://example.com/{i}" for i in range(len(urls))]  # in order, no gap
    assert len(urls) > acknowledged  # every acknowledged page is there
    assert all(p.body == b"x" * (i % 5000) for i, p in enumerate(pages))


def test_recovery_cuts_a_torn_tail(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        for i in range(5):
            spool.append(_page(i))
    (segment,) = ready_segments(tmp_path)
    data = segment.read_bytes()
    torn = tmp_path / segment.name.replace(READY, "-x" + OPEN)
    torn.write_bytes(data[:-7])  # the last record lost its gzip trailer
    segment.unlink()
    ready = recover_segment(torn)
    assert ready is not None and ready.name.endswith(READY)
    assert [p.url for p in read_segment(ready)] == [f"http://example.com/{i}" for i in range(4)]
    empty = tmp_path / ("0" * 20 + "-1" + OPEN)
    empty.write_bytes(data[:10])
    assert recover_segment(empty) is None and not empty.exists()


def _damaged(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("name", "make", "before"),
    [
        ("random", lambda good: os.urandom(5000), 0),
        ("truncated", lambda good: good[:-30], 2),
        ("not-warc", lambda good: good + gzip.compress(b"hello, not a WARC record\n"), 3),
        ("garbage-tail", lambda good: good + b"\x00\x01garbage", 3),
        (
            "bad-length",
            lambda good: good + gzip.compress(b"WARC/1.1\r\nContent-Length: 99\r\n\r\nshort"),
            3,
        ),
    ],
)
def test_a_damaged_segment_names_the_file(
    tmp_path: Path, name: str, make: object, before: int
) -> None:
    with Spool(tmp_path / "w") as spool:
        for i in range(3):
            spool.append(_page(i))
    (segment,) = ready_segments(tmp_path / "w")
    path = _damaged(tmp_path, f"{name}.warc.gz", make(segment.read_bytes()))  # type: ignore[operator]
    got: list[Page] = []
    with pytest.raises(SpoolCorrupt) as info:
        got.extend(read_segment(path))
    assert str(path) in str(info.value)
    assert "warcio check" in str(info.value)
    assert len(got) == before  # the pages before the damage were delivered


def test_two_consumers_never_share_a_segment_and_orphans_are_taken_over(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=500) as spool:
        for i in range(6):
            spool.append(_page(i, body=os.urandom(600)))
    assert len(ready_segments(tmp_path)) == 6
    first = claim_next(tmp_path)
    second = claim_next(tmp_path)
    assert first is not None and second is not None and first.path != second.path
    assert len(ready_segments(tmp_path)) == 4
    # A consumer in another process claims one and dies without finishing it.
    code = (
        "import os, sys; from urlsieve.learn.spool import claim_next; "
        "c = claim_next(sys.argv[1]); print(c.path, flush=True); os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    orphan = Path(out.stdout.strip())
    assert orphan.exists() and orphan.name.endswith(".reading")
    third = claim_next(tmp_path)  # the orphan first: its lock died with its process
    assert third is not None and third.path == orphan
    first.done()
    second.release()
    third.done()
    assert not first.path.exists() and not orphan.exists()
    seen = 0
    while (claim := claim_next(tmp_path)) is not None:
        with claim:
            seen += len(list(claim.pages()))
            claim.done()
    assert seen == 4  # the released one and the three never claimed


def test_claim_exit_without_done_gives_the_segment_back(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append(_page())
    with pytest.raises(RuntimeError), claim_next(tmp_path) as claim:  # type: ignore[union-attr]
        raise RuntimeError("classifier failed")
    assert len(ready_segments(tmp_path)) == 1 and not claim.path.exists()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=3000), prefix=st.booleans())
def test_reader_raises_only_spool_corrupt(tmp_path: Path, data: bytes, prefix: bool) -> None:
    if prefix:  # start like a real segment so the fuzzer gets past the gzip header
        good = gzip.compress(b"WARC/1.1\r\nWARC-Type: response\r\nContent-Length: ")
        data = good + data
    path = tmp_path / "fuzz.warc.gz"
    path.write_bytes(data)
    try:
        for page in read_segment(path):
            assert isinstance(page, Page)
    except SpoolCorrupt as exc:
        assert str(path) in str(exc)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(record=st.binary(max_size=400))
def test_reader_on_hostile_decompressed_records(tmp_path: Path, record: bytes) -> None:
    head = b"WARC/1.1\r\nWARC-Type: response\r\nContent-Length: %d\r\n\r\n" % len(record)
    path = tmp_path / "fuzz2.warc.gz"
    path.write_bytes(gzip.compress(head + record + b"\r\n\r\n"))
    try:
        list(read_segment(path))
    except SpoolCorrupt as exc:
        assert str(path) in str(exc)


def test_a_record_bomb_is_refused_without_decompressing_it_all(tmp_path: Path) -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"\0" * (1 << 20)
    data = b"".join(compressor.compress(chunk) for _ in range(300)) + compressor.flush()
    path = _damaged(tmp_path, "bomb.warc.gz", data)
    with pytest.raises(SpoolCorrupt, match="larger than"):
        list(read_segment(path))
