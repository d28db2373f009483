"""``parse_url`` and ``canonicalize`` take the compiled path and answer what the full parser does.

The compiled path (``_speedups.url_parts`` and ``canonical_rewrite``) is the
canonical scan, then the near-canonical rewrite of the default steps; the full
parser (``_parse_slow``) stays the definition. Without the extension, the
``_FAST`` regex and then the full parser serve: both paths are held to it here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_fingerprint_batch import WIDE_URLS
from tests.url.test_properties import URLISH
from tests.url.test_speedups import EDGES, near_canonical
from urlsieve import InvalidURL
from urlsieve.url import parse
from urlsieve.url.model import URL
from urlsieve.url.parse import _parse_slow, canonicalize, parse_url
from urlsieve.url.profile import CRAWLER, FILTER, Profile, crawler_profile

compiled = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")

# FILTER; a profile that keeps ports and drops empty queries but keeps the default
# query steps (its query may take the fast path); the crawler (sorted queries: never).
PROFILES = [FILTER, crawler_profile(sort=False, drop=(), name="plain"), CRAWLER]


@pytest.fixture(params=["compiled", "pure"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "pure":
        monkeypatch.setattr(parse, "_url_parts", None)
        monkeypatch.setattr(parse, "_canonical_rewrite", None)
    yield request.param


def _same_as_the_full_parser(text: str) -> None:
    for profile in PROFILES:
        try:
            want = _parse_slow(text, profile)
        except InvalidURL:
            with pytest.raises(InvalidURL):
                parse_url(text, profile)
            with pytest.raises(InvalidURL):
                canonicalize(text, profile)
            continue
        got = parse_url(text, profile)
        assert type(got) is URL
        assert got == want, (text, profile.name)
        assert canonicalize(text, profile) == want.canonical, (text, profile.name)


@pytest.mark.parametrize(
    "text",
    [
        *EDGES,
        "HTTP://WWW.Example.COM/a/./b/../c//d?x=1#frag",
        "http://u@a.com/x",  # userinfo: URL.userinfo keeps it
        "http://u:p@a.com:8080/x",
        "http://a.com:80/x",  # a port: URL.port keeps it, even the default
        "https://a.com:8443/x",
        "http://a.com:/x",
        "http://a.com:99999/x",
        "http://a.com/p?",  # an empty query, which the plain profile drops
        "http://a.com/?",
        "www.Example.com/a%41",
        "http://a.com/ü?ß",
        "http://1.2.3.4/x",
        "http://0x7f.1/",
        "http://[::1]/",
    ],
)
def test_edge_cases_parse_as_the_full_parser_does(path: str, text: str) -> None:
    _same_as_the_full_parser(text)


# The fixture picks the path once for all inputs (nothing in it is per input).
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(near_canonical(), URLISH, WIDE_URLS.filter(bool).map(lambda urls: urls[0])))
@example("http://a.example:8080/x")
@example("ftp://u:pä@example.com/x")
def test_generated_urls_parse_as_the_full_parser_does(path: str, text: str) -> None:
    _same_as_the_full_parser(text)


@pytest.mark.parametrize(
    "text",
    [
        "http://www.example.com/a/b?x=1",
        "www.example.com",
        "HTTP://WWW.Example.COM/a/./b/../c//d?x=1#frag",
        "http://a.com/%7e%41/",
        "http://a.com/ü",
    ],
)
def test_canonical_and_near_canonical_urls_never_reach_the_full_parser(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = _parse_slow(text, FILTER)

    def full_parser(url: str, profile: Profile) -> URL:
        raise AssertionError(f"{url!r} went to the full parser")

    monkeypatch.setattr(parse, "_parse_slow", full_parser)
    assert parse_url(text) == want
    assert canonicalize(text) == want.canonical


def test_userinfo_and_ports_go_to_the_full_parser() -> None:
    """The compiled rewrite drops both; parse_url's URL keeps them, so it must not serve."""
    assert compiled.url_parts("http://u@a.com/", True, False, URL) is None
    assert compiled.url_parts("http://a.com:81/", True, False, URL) is None
    assert parse_url("http://u@A.com:81/").userinfo == "u"
    assert parse_url("http://u@A.com:81/").port == 81
    # canonicalize drops both under the filter profile, so the rewrite serves it there
    assert compiled.canonical_rewrite("http://u@A.com:81/x", True, False) == "http://a.com/x"
    assert compiled.canonical_rewrite("http://A.com:81/x", True, True) is None


def test_an_empty_query_a_profile_drops_is_dropped_on_every_path() -> None:
    plain = PROFILES[1]
    assert not plain.fast_query
    assert canonicalize("http://a.com/p?", plain) == "http://a.com/p"
    assert parse_url("http://a.com/p?", plain).query is None
    assert canonicalize("http://a.com/p?", FILTER) == "http://a.com/p?"


def test_the_url_is_an_immutable_named_tuple() -> None:
    url = parse_url("https://u@Bücher.example:8443/~a")
    assert url == URL("https", "xn--bcher-kva.example", "/~a", None, 8443, "u")
    assert repr(url) == (
        "URL(scheme='https', host='xn--bcher-kva.example', path='/~a', query=None, "
        "port=8443, userinfo='u', is_ip=False)"
    )
    with pytest.raises(AttributeError):
        url.host = "evil.example"  # type: ignore[misc]
    moved = url._replace(host="1.2.3.4", is_ip=True)
    assert moved.canonical == "https://1.2.3.4/~a"
    assert url.host == "xn--bcher-kva.example"
    assert {parse_url("http://a.com/"), parse_url("HTTP://A.COM/")} == {URL("http", "a.com", "/")}
    # keeps_port is compared (two profiles' URLs differ) but not shown
    assert parse_url("http://a.com/", CRAWLER) != parse_url("http://a.com/")
    assert "keeps_port" not in repr(parse_url("http://a.com/", CRAWLER))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"http://a.com/", True, False, URL), "must be str, not bytes"),
        (("http://a.com/", True, False), "4 arguments"),
        (("http://a.com/", True, False, dict), "subclass of tuple"),
        (("http://a.com/", True, False, "URL"), "subclass of tuple"),
    ],
)
def test_url_parts_refuses_misuse(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        compiled.url_parts(*args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"http://a.com/", True, False), "must be str, not bytes"),
        (("http://a.com/", True), "3 arguments"),
    ],
)
def test_canonical_rewrite_refuses_misuse(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        compiled.canonical_rewrite(*args)


@given(st.binary(max_size=200), st.booleans(), st.booleans())
def test_arbitrary_bytes_never_crash_the_compiled_path(
    data: bytes, allow_query: bool, keep_port: bool
) -> None:
    text = data.decode("utf-8", "surrogateescape")
    for result in (
        compiled.url_parts(text, allow_query, keep_port, URL),
        compiled.canonical_rewrite(text, allow_query, keep_port),
    ):
        if result is not None:
            assert _parse_slow(str(result), FILTER).canonical == str(result)


def test_a_url_built_in_c_is_left_out_of_the_collector() -> None:
    """Its items are strings, None and bools: tracking it would only cost collections."""
    import gc

    assert not gc.is_tracked(parse_url("http://www.example.com/a?b"))
    assert not gc.is_tracked(parse_url("HTTP://WWW.Example.com/a/../b"))
