from __future__ import annotations

import hashlib
import zlib

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from urlsieve import InvalidURL, parse_url
from urlsieve.fingerprint import (
    canonical_bytes,
    fingerprint64,
    fingerprint128,
    fingerprints64,
    signature,
)


def test_fingerprints_are_of_the_canonical_bytes() -> None:
    raw = "HTTP://Example.COM:80/a/../b"
    data = b"http://example.com/b"
    assert canonical_bytes(raw) == data
    assert fingerprint64(raw) == xxhash.xxh3_64_intdigest(data)
    assert fingerprint128(raw) == xxhash.xxh3_128_digest(data)
    assert fingerprint64(parse_url(raw)) == fingerprint64("http://example.com/b")
    assert signature(raw, "crc32") == zlib.crc32(data).to_bytes(4, "big")
    assert signature(raw, "md5") == hashlib.md5(data).digest()
    assert signature(raw, "sha1") == hashlib.sha1(data).digest()
    assert len(signature(raw, "xxh128")) == 16
    assert fingerprints64([raw, "example.com/b"]) == [fingerprint64(raw)] * 2
    with pytest.raises(ValueError, match="unknown signature"):
        signature(raw, "crc64")  # type: ignore[arg-type]
    with pytest.raises(InvalidURL):
        fingerprint64("mailto:x@y")


@given(st.sampled_from(["http://%77ww.a.com/", "http://WWW.A.COM", "www.a.com:80/./"]))
def test_equivalent_urls_share_a_fingerprint(spelling: str) -> None:
    assert fingerprint64(spelling) == fingerprint64("http://www.a.com/")
