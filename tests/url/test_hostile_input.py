"""The canonicaliser under attack: bytes, huge numbers, deep escapes, long input (issue 9).

Every input, ``str`` or ``bytes``, returns a canonical URL or raises
:class:`InvalidURL`; nothing else escapes. Linearity is shown by counting
passes and by bounded sizes, never by timing.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

import idna
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.url.test_properties import URLISH
from urlsieve import CRAWLER, InvalidURL, canonicalize, parse_url
from urlsieve.url import MAX_URL_LENGTH, crawler_profile
from urlsieve.url import host as host_module
from urlsieve.url import path as path_module
from urlsieve.url.parse import _parse_slow
from urlsieve.url.path import unescape


def _canon_or_none(url: str | bytes, profile: object = None) -> str | None:
    try:
        result = canonicalize(url) if profile is None else canonicalize(url, CRAWLER)
    except InvalidURL:
        return None
    assert isinstance(result, str)
    assert result.isascii()
    return result


# --- bytes stay bytes (issue 9, item 5) ---------------------------------------------------

SAME_URL: list[tuple[str | bytes, str]] = [
    (b"http://evil.com/\xff", "http://evil.com/%FF"),
    ("http://evil.com/\udcff", "http://evil.com/%FF"),
    ("http://evil.com/%ff", "http://evil.com/%FF"),
    (b"http://a.com/caf\xe9", "http://a.com/caf%E9"),
    ("http://a.com/caf\udce9", "http://a.com/caf%E9"),
    (b"http://a.com/caf\xc3\xa9", "http://a.com/caf%C3%A9"),
    ("http://a.com/café", "http://a.com/caf%C3%A9"),
    (b"http://a.com/p?q=\xe9", "http://a.com/p?q=%E9"),
    ("http://a.com/p?q=\udce9", "http://a.com/p?q=%E9"),
    (b"http://a.com/%\xff%41", "http://a.com/%25%FFA"),
    # a genuine lone surrogate in a str: its UTF-8-style bytes, as the bytes would give
    ("http://a.com/\ud800", "http://a.com/%ED%A0%80"),
    (b"http://a.com/\xed\xa0\x80", "http://a.com/%ED%A0%80"),
    ("http://a.com/\udfff\udce9?\udbff", "http://a.com/%ED%BF%BF%E9?%ED%AF%BF"),
    (b"example.com", "http://example.com/"),
]


@pytest.mark.parametrize(("raw", "expected"), SAME_URL)
def test_bytes_that_are_not_utf8_stay_bytes(raw: str | bytes, expected: str) -> None:
    assert canonicalize(raw) == expected
    assert parse_url(raw).canonical == expected
    assert canonicalize(expected) == expected


@pytest.mark.parametrize(
    "raw",
    [b"http://\xe9vil.com/", "http://\udce9vil.com/", b"http://%e9vil.com/", b"http://a\xff/"],
)
def test_a_host_that_is_not_utf8_is_invalid(raw: str | bytes) -> None:
    with pytest.raises(InvalidURL, match="not UTF-8"):
        canonicalize(raw)


# --- dot segments before slashes (item 4) -------------------------------------------------

DOTS: list[tuple[str, str]] = [
    ("http://bad.org/ads//../x", "http://bad.org/ads/x"),
    ("http://a.com/a//../b", "http://a.com/a/b"),
    ("http://a.com/a///../../b", "http://a.com/a/b"),
    ("http://bad.org/ads/%2F../x", "http://bad.org/ads/x"),
    ("http://bad.org/ads/%252F%252E%252E/x", "http://bad.org/ads/x"),
    ("http://bad.org/ads\\\\..\\x", "http://bad.org/ads/x"),
    ("http://a.com/a/b//..", "http://a.com/a/b/"),
    ("http://a.com/a//.", "http://a.com/a/"),
    ("http://a.com/..//x", "http://a.com/x"),
    ("http://a.com//../x", "http://a.com/x"),
    ("http://a.com/a/..//", "http://a.com/"),
    # "#" and "?" escaped in a segment are part of it, and go with it (issue 9 item 2)
    ("http://bad.org/x%23/../ads", "http://bad.org/ads"),
    ("http://bad.org/x%3F/../ads", "http://bad.org/ads"),
    ("http://bad.org/x%2523/..%2Fads", "http://bad.org/ads"),
    # Unicode spaces are path bytes, never separators (item 3)
    ("http://bad.org/ads\u3000x", "http://bad.org/ads%E3%80%80x"),
    ("http://bad.org/ads\u2028/../x", "http://bad.org/x"),
]


@pytest.mark.parametrize(("raw", "expected"), DOTS)
def test_dot_segments_are_resolved_before_slashes_collapse(raw: str, expected: str) -> None:
    assert canonicalize(raw) == expected
    assert canonicalize(raw.encode()) == expected


# --- numbers are length-checked before int() (item 9) -------------------------------------

LONG_NUMBERS: list[tuple[str, str]] = [
    ("http://a.com:" + "9" * 5000 + "/", "invalid port"),
    ("http://a.com:" + "1" * 6 + "/", "invalid port"),
    ("http://[::1]:" + "9" * 5000 + "/", "invalid port"),
    ("a.com:" + "9" * 5000, "invalid port"),
    ("http://" + "9" * 5000 + "/", "significant digits"),
    ("http://1.2.3." + "9" * 5000 + "/", "significant digits"),
    ("http://" + "9" * 5000 + ".1/", "significant digits"),
    ("http://0x" + "f" * 5000 + "/", "significant digits"),
    ("http://0" + "7" * 5000 + "/", "significant digits"),
    ("http://%39" * 1 + "9" * 5000 + "/", "significant digits"),
]


@pytest.mark.parametrize(("raw", "reason"), LONG_NUMBERS)
def test_long_numbers_are_invalid_urls_not_value_errors(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as info:
        canonicalize(raw)
    assert reason in info.value.reason
    assert len(info.value.reason) < 200  # the number is shortened in the message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://a.com:" + "0" * 5000 + "8080/", "http://a.com:8080/"),
        ("http://" + "0" * 5000 + "/", "http://0.0.0.0/"),
        ("http://0x" + "0" * 5000 + "7f.1/", "http://127.0.0.1/"),
        ("http://" + "0" * 5000 + "12.0.0.1/", "http://10.0.0.1/"),
        ("http://999999999999/", "http://212.165.15.255/"),  # 12 digits: wraps mod 2**32,
    ],
)
def test_leading_zeros_do_not_count_as_digits(raw: str, expected: str) -> None:
    assert canonicalize(raw, CRAWLER) == expected


# --- percent-unescaping is linear (item 8) ------------------------------------------------


def _unescape_by_passes(data: bytes) -> bytes:
    """The definition: ``unquote_to_bytes`` until nothing changes (one pass per level)."""
    while True:
        decoded = unquote_to_bytes(data)
        if decoded == data:
            return data
        data = decoded


_ESCAPISH = st.lists(
    st.one_of(
        st.sampled_from([b"%", b"%2", b"%25", b"%32", b"%35", b"2", b"5", b"%3", b"a", b"F", b"/"]),
        st.binary(max_size=3),
    ),
    max_size=40,
).map(b"".join)


@given(_ESCAPISH)
@example(b"%2525252525")
@example(b"%%32%35%35")
@example(b"%2%35%35")
@example(b"%%%25%32%35asd%%")
@example(b"%25%32%35%25%32%35")
@example(b"%%341")
def test_unescape_is_the_fixpoint_of_repeated_unquoting(data: bytes) -> None:
    assert unescape(data) == _unescape_by_passes(data)


@pytest.mark.parametrize(
    "data",
    [
        b"%25" * 20000,
        b"%" + b"25" * 30000,
        b"%" * 10000 + b"32" * 10000 + b"35" * 10000,
        b"%%32%35" * 8000,
        b"%2" + b"%35" * 20000,
    ],
)
def test_unescape_makes_at_most_one_library_pass(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counting(text: bytes) -> bytes:
        calls.append(len(text))
        return unquote_to_bytes(text)

    monkeypatch.setattr(path_module, "unquote_to_bytes", counting)
    unescape(data)
    assert len(calls) <= 1


def test_deeply_nested_escapes_reach_the_fixpoint() -> None:
    assert canonicalize("http://a.com/%" + "25" * 30000 + "2e%2e/x") == "http://a.com/x"
    assert canonicalize("http://%" + "25" * 10000 + "61.com/") == "http://a.com/"


# --- bounded sizes: the URL cap and the IDN limits ----------------------------------------


@pytest.mark.parametrize("kind", [str, bytes])
def test_urls_longer_than_the_cap_are_invalid(kind: type) -> None:
    base = "http://a.com/"
    url = base + "x" * (MAX_URL_LENGTH - len(base))
    longer = url + "x"
    if kind is bytes:
        url, longer = url.encode(), longer.encode()  # type: ignore[assignment]
    assert canonicalize(url).endswith("x")
    with pytest.raises(InvalidURL, match=f"URL longer than {MAX_URL_LENGTH}") as info:
        canonicalize(longer)
    assert len(str(info.value)) < 300
    with pytest.raises(InvalidURL, match="URL longer than"):
        parse_url(longer)


def test_the_cap_is_64_kib() -> None:
    assert MAX_URL_LENGTH == 65536


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("http://" + "".join(chr(0x4E00 + i) for i in range(64)) + ".com/", "DNS label (63)"),
        ("http://" + ".".join(["ü" * 60] * 5) + "/", "DNS name (253)"),
    ],
)
def test_internationalised_hosts_longer_than_dns_allows_are_invalid(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as info:
        canonicalize(raw)
    assert reason in info.value.reason


@settings(max_examples=300)
@given(st.text(alphabet=st.sampled_from("aßüçé中文ｆＡ。．.-_é\u0301\u200d%41 xn"), max_size=30))
def test_remembered_idn_steps_equal_the_codecs(host: str) -> None:
    """map_idn and punycode remember non-ASCII hosts and labels (both pure Python, ~30 µs
    a host): asked twice, each answers as idna and the codec do, or raises each time."""
    host = "ü" + host
    try:
        want: str | Exception = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        want = exc
    for _ in range(2):
        if isinstance(want, Exception):
            with pytest.raises(InvalidURL, match="IDNA does not allow"):
                host_module.map_idn(host)
        else:
            assert host_module.map_idn(host) == want
    labels = [label for label in host.split(".") if label and not label.isascii()]
    for label in labels:
        if len(label) <= 63:
            coded = "xn--" + label.encode("punycode").decode("ascii")
            assert host_module.punycode(label) == host_module.punycode(label) == coded


def test_the_remembered_idn_steps_are_bounded() -> None:
    """At most _IDN_CACHE entries each; a host longer than a DNS name is not remembered."""
    remembered = host_module._uts46_remembered
    assert remembered.cache_info().maxsize == host_module._punycode_remembered.cache_info().maxsize
    assert 0 < (remembered.cache_info().maxsize or 0) <= 4096
    long_host = "ü" * 300
    before = remembered.cache_info().currsize
    assert host_module.map_idn(long_host) == long_host
    assert remembered.cache_info().currsize == before
    # a short host whose mapping is long (U+FDFA maps to 18 characters): answered, not kept
    expands = "\ufdfa" * 20
    want = idna.uts46_remap(expands, std3_rules=False, transitional=False)
    assert len(want) > 253
    assert host_module.map_idn(expands) == host_module.map_idn(expands) == want
    assert remembered.cache_info().currsize == before
    for k in range(5000):
        host_module.map_idn(f"ü{k}.example")
    assert remembered.cache_info().currsize <= 4096


def test_long_hosts_and_paths_within_the_cap_are_answered() -> None:
    host = ".".join(["a"] * 30000)
    assert canonicalize(f"http://{host}/") == f"http://{host}/"
    assert canonicalize("http://a.com/" + "../" * 20000 + "x") == "http://a.com/x"
    assert canonicalize("http://a.com" + "/" * 60000 + "x") == "http://a.com/x"
    ok = "".join(chr(0x4E00 + i) for i in range(63))
    assert canonicalize(f"http://{ok}.com/").startswith("http://xn--")


# --- the crawler keeps a non-default port (item 10) ---------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://a.com:8080/", "http://a.com:8080/"),
        ("http://a.com:80/", "http://a.com/"),
        ("https://a.com:443/x", "https://a.com/x"),
        ("https://a.com:80/x", "https://a.com:80/x"),
        ("ws://a.com:80/", "ws://a.com/"),
        ("wss://a.com:443/", "wss://a.com/"),
        ("ftp://a.com:21/", "ftp://a.com/"),
        ("a.com:3000/p?utm_source=x", "http://a.com:3000/p"),
        ("http://user@[::1]:8443/", "http://[::1]:8443/"),
        ("http://A.com:08080/", "http://a.com:8080/"),
    ],
)
def test_the_crawler_keeps_a_non_default_port(raw: str, expected: str) -> None:
    assert canonicalize(raw, CRAWLER) == expected
    assert parse_url(raw, CRAWLER).canonical == expected
    assert canonicalize(expected, CRAWLER) == expected


def test_the_fast_and_the_slow_path_give_the_crawler_one_url() -> None:
    fast = parse_url("http://a.com/x", CRAWLER)
    assert fast == _parse_slow("http://a.com/x", CRAWLER)
    assert fast.keeps_port


def test_ports_are_other_servers_to_the_crawler_only() -> None:
    assert canonicalize("http://a.com:8080/", CRAWLER) != canonicalize("http://a.com/", CRAWLER)
    assert canonicalize("http://a.com:8080/") == canonicalize("http://a.com/")
    url = parse_url("http://a.com:8080/x", CRAWLER)
    assert (url.host, url.port, url.location) == ("a.com", 8080, "a.com:8080/x")


def test_the_crawler_profile_version_changed_with_its_rules() -> None:
    assert CRAWLER.ident == "crawler/2"
    assert crawler_profile(sort=False).keep_port


# --- every input returns or raises InvalidURL ---------------------------------------------


@given(st.binary(max_size=200))
@example(b"http://a.com:" + b"9" * 5000)
@example(b"http://\xff/")
@example(b"\xff\xfe")
@example(b"http://[\xff]/")
@example(b"http://a.com/\xed\xa0\x80")
def test_arbitrary_bytes_return_or_raise_invalid_url(data: bytes) -> None:
    for profile in (None, CRAWLER):
        result = _canon_or_none(data, profile)
        if result is not None:
            assert _canon_or_none(result, profile) == result


_NOT_UTF8 = st.sampled_from([b"\xff", b"\xe9", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xc3\xa9"])


@given(st.lists(st.tuples(URLISH, _NOT_UTF8), max_size=4))
def test_urlish_bytes_are_idempotent(pieces: list[tuple[str, bytes]]) -> None:
    data = b"".join(text.encode("utf-8", "surrogatepass") + raw for text, raw in pieces)
    for profile in (None, CRAWLER):
        result = _canon_or_none(data, profile)
        if result is not None:
            assert _canon_or_none(result, profile) == result
            assert _canon_or_none(result.encode(), profile) == result


@given(URLISH)
def test_bytes_and_their_text_are_one_url(text: str) -> None:
    try:
        data = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return
    assert _canon_or_none(data) == _canon_or_none(text)


@given(st.text())
@example("http://a.com/\ud800\udfff")
@example("http://a.com/\udce9\ud800")
def test_arbitrary_text_with_surrogates_returns_or_raises_invalid_url(text: str) -> None:
    result = _canon_or_none(text)
    if result is not None:
        assert canonicalize(result) == result
