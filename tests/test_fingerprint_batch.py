"""The batch fingerprints (compiled for the canonical fast path) equal the reference: xxhash over
``canonicalize(url).encode("ascii")``, URL by URL."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway import rulegen
from tests.needs import missing
from urlsieve import InvalidURL
from urlsieve._accel import speedups
from urlsieve.fingerprint import (
    CHUNK,
    fingerprint64,
    fingerprint128,
    fingerprint_array64,
    fingerprint_array128,
)
from urlsieve.url.profile import CRAWLER, FILTER, Profile

URLS = st.lists(
    st.one_of(
        st.sampled_from(rulegen.random_urls(300, 4)),
        st.text(alphabet=st.sampled_from("abcdehpstwx.:/?=&%#-_019AZ\\ "), max_size=50),
    ),
    max_size=40,
)


def _valid(urls: list[str], profile: Profile) -> list[str]:
    out = []
    for url in urls:
        try:
            fingerprint64(url, profile)
        except InvalidURL:
            continue
        out.append(url)
    return out


@settings(max_examples=300, deadline=None)
@given(urls=URLS, crawler=st.booleans())
def test_batch_fingerprints_equal_the_reference(urls: list[str], crawler: bool) -> None:
    profile = CRAWLER if crawler else FILTER
    urls = _valid(urls, profile)
    assert fingerprint_array64(urls, profile).tolist() == [fingerprint64(u, profile) for u in urls]
    want = [int.from_bytes(fingerprint128(u, profile), "big") for u in urls]
    got = fingerprint_array128(urls, profile)
    assert [(int(h) << 64) | int(lo) for h, lo in got] == want


def test_large_batches_are_cut_and_a_bad_url_raises() -> None:
    urls = [f"http://h{i % 977}.example/p/{i}" for i in range(2 * CHUNK + 5)]
    assert fingerprint_array64(urls).tolist() == [fingerprint64(u) for u in urls]
    with pytest.raises(InvalidURL):
        fingerprint_array64([*urls[:3], "javascript:x", "http://a.example/"])


def test_the_compiled_batch_refuses_misuse() -> None:
    fn = getattr(speedups, "canonical_hashes", None)
    if fn is None:
        missing("urlsieve._speedups built without xxhash.h (libxxhash-dev)")
    out = np.empty(2, dtype=np.uint64)
    with pytest.raises(TypeError):
        fn(("a",), True, 64, out)
    with pytest.raises(ValueError):
        fn(["a"], True, 32, out)
    with pytest.raises(ValueError):
        fn(["a"], True, 64, out)  # out is not one word per URL
    assert fn([1, b"x", "http://a.example/", "\udcff"], True, 64, np.empty(4, np.uint64)) == [
        0,
        1,
        3,
    ]
