"""Properties of the canonicaliser over arbitrary and URL-like strings (Hypothesis)."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from urlsieve import CRAWLER, InvalidURL, canonicalize, lookup_expressions, parse_url
from urlsieve.url.parse import _fast_match, _parse_slow
from urlsieve.url.profile import FILTER

# Characters that matter to URL parsing, weighted towards the tricky ones.
_TRICKY = st.sampled_from(
    [*list("/\\?#@:.%[]"), "%2e", "%2f", "%25", "%00", "%C3%BC", "..", "0x", "ü", "。", "\t", " "]
)
_ALNUM = st.text(alphabet="abcXYZ019-_", min_size=1, max_size=6)
_PIECE = st.one_of(_ALNUM, _TRICKY, st.text(max_size=3))
_SCHEME = st.sampled_from(
    ["http://", "HTTPS://", "ftp:", "ws://", "", "//", "javascript:", "http:\\\\"]
)
URLISH = st.builds(
    lambda scheme, parts: scheme + "".join(parts), _SCHEME, st.lists(_PIECE, max_size=25)
)


def _canon_or_none(text: str) -> str | None:
    try:
        result = canonicalize(text)
    except InvalidURL:
        return None
    assert isinstance(result, str)
    return result


@given(st.text())
@example("http://[::ffff:0.0.0.0]/")
@example("http://a.com/%25%32%35%")
def test_arbitrary_strings_return_or_raise_invalid_url(text: str) -> None:
    result = _canon_or_none(text)
    if result is not None:
        assert canonicalize(result) == result


@given(URLISH)
@example("http://a.com/a%3Fb/../c")
@example("http://a.com/x%3F/..")
@example("http://0x.0x/")
@example("a.com/b:c")
@example("ab:cd/x")
@example("a.com")
@example("http://a.com?x=1")
def test_urlish_strings_are_idempotent(text: str) -> None:
    result = _canon_or_none(text)
    if result is not None:
        assert canonicalize(result) == result
        assert result.isascii()
        assert parse_url(result).canonical == result


@given(URLISH)
def test_crawler_profile_is_idempotent(text: str) -> None:
    try:
        result = canonicalize(text, CRAWLER)
    except InvalidURL:
        return
    assert canonicalize(result, CRAWLER) == result


@given(URLISH)
def test_fast_path_only_accepts_fixpoints_of_the_full_pipeline(text: str) -> None:
    # Whatever canonicalisation returns must also be taken by the fast path
    # only if the slow path would return it unchanged.
    result = _canon_or_none(text)
    for candidate in (text, result, text.lstrip("/:")):
        if candidate is None:
            continue
        m = _fast_match(candidate, FILTER.fast_query)
        if m is not None:
            assert _parse_slow(candidate, FILTER).canonical == canonicalize(candidate)
            assert _parse_slow(candidate, FILTER) == parse_url(candidate)


@given(URLISH)
def test_lookup_expressions_start_with_the_exact_location(text: str) -> None:
    try:
        url = parse_url(text)
    except InvalidURL:
        return
    expressions = lookup_expressions(url)
    assert expressions[0] == url.location
    assert len(set(expressions)) == len(expressions)
