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
    _same_as_the_reference(urls, CRAWLER if crawler else FILTER)


def _same_as_the_reference(urls: list[str], profile: Profile) -> None:
    urls = _valid(urls, profile)
    assert fingerprint_array64(urls, profile).tolist() == [fingerprint64(u, profile) for u in urls]
    want = [int.from_bytes(fingerprint128(u, profile), "big") for u in urls]
    got = fingerprint_array128(urls, profile)
    assert [(int(h) << 64) | int(lo) for h, lo in got] == want


# Beyond ASCII: the compiled batch encodes a str as path.py's to_bytes does and escapes
# those bytes in the path and the query; anywhere before the path (IDN, userinfo) and for
# any surrogate, the reference decides.
_WIDE = st.lists(
    st.sampled_from(
        [
            *"aZ09./?=&%#:@\\-",
            "ü",
            "é",
            "ß",
            "Ａ",
            "\u3002",
            "\u00a0",
            "😀",
            "\udcff",
            "\udc80",
            "\ud800",
            "\u0301",
            "%C3%BC",
            "%c3",
            "/../",
            "//",
        ]
    ),
    max_size=20,
).map("".join)
WIDE_URLS = st.lists(
    st.builds(
        lambda scheme, host, rest: scheme + host + rest,
        st.sampled_from(["http://", "HTTPS://", "", "ftp://u:pä@"]),
        st.sampled_from(["example.com", "Bücher.example", "a.example:8080", "xn--bcher-kva.de"]),
        st.one_of(_WIDE.map(lambda t: "/" + t), _WIDE),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(urls=WIDE_URLS, crawler=st.booleans())
def test_batch_fingerprints_of_urls_beyond_ascii_equal_the_reference(
    urls: list[str], crawler: bool
) -> None:
    _same_as_the_reference(urls, CRAWLER if crawler else FILTER)


def test_a_path_beyond_ascii_is_hashed_in_c() -> None:
    fn = getattr(speedups, "canonical_hashes", None)
    if fn is None:
        missing("urlsieve._speedups lacks the batch paths: a stale build (urlsieve doctor)")
    urls = ["http://example.com/Führerschein/ü?q=é", "http://bücher.example/x", "\udcff.example/"]
    out = np.empty((3, 2), np.uint64)
    assert fn(urls, True, 128, out, False) == [1, 2]  # IDN and the surrogate: the reference
    assert fingerprint_array128(urls[:1]).tolist() == [
        [
            int.from_bytes(fingerprint128(urls[0])[:8], "big"),
            int.from_bytes(fingerprint128(urls[0])[8:], "big"),
        ]
    ]


def test_large_batches_are_cut_and_a_bad_url_raises() -> None:
    urls = [f"http://h{i % 977}.example/p/{i}" for i in range(2 * CHUNK + 5)]
    assert fingerprint_array64(urls).tolist() == [fingerprint64(u) for u in urls]
    with pytest.raises(InvalidURL):
        fingerprint_array64([*urls[:3], "javascript:x", "http://a.example/"])


def test_the_compiled_batch_refuses_misuse() -> None:
    fn = getattr(speedups, "canonical_hashes", None)
    if fn is None:
        missing("urlsieve._speedups lacks the batch paths: a stale build (urlsieve doctor)")
    out = np.empty(2, dtype=np.uint64)
    with pytest.raises(TypeError):
        fn(("a",), True, 64, out, False)
    with pytest.raises(TypeError):
        fn(["a"], True, 64, out)  # keep_port missing
    with pytest.raises(ValueError):
        fn(["a"], True, 32, out, False)
    with pytest.raises(ValueError):
        fn(["a"], True, 64, out, False)  # out is not one word per URL
    odd = [1, b"x", "http://a.example/", "\udcff"]
    assert fn(odd, True, 64, np.empty(4, np.uint64), False) == [0, 1, 3]


def test_a_profile_that_keeps_ports_leaves_a_port_to_the_reference() -> None:
    fn = getattr(speedups, "canonical_hashes", None)
    if fn is None:
        missing("urlsieve._speedups lacks the batch paths: a stale build (urlsieve doctor)")
    urls = ["http://a.example:8080/", "HTTP://A.example/x"]
    assert fn(urls, False, 64, np.empty(2, np.uint64), True) == [0]
    assert fn(urls, False, 64, np.empty(2, np.uint64), False) == []  # the filter drops it
    for profile in (CRAWLER, FILTER):  # the crawler keeps :8080, the filter drops it
        assert fingerprint_array64(urls, profile).tolist() == [
            fingerprint64(u, profile) for u in urls
        ]
    assert fingerprint64(urls[0], CRAWLER) != fingerprint64(urls[0], FILTER)
