"""Long pages (issue 30, item 7): the classifier reads a body in segments, as it comes, with
bounded memory; the result does not depend on how the bytes were fed, and a phrase across a
segment's cut is found once (differential tests against one-piece classification)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.learn.origin import load_test_phrases
from urlsieve.learn.classify import Classification, Classifier

PHRASES = load_test_phrases()
# Segments of a few dozen bytes, so that Hypothesis' small bodies are cut many times.
TINY = Classifier(PHRASES, max_bytes=64, max_chars=48, max_scan_bytes=3000)
WHOLE = Classifier(PHRASES, max_bytes=1 << 20, max_chars=1 << 20)

FRAGMENTS = st.sampled_from(
    [
        b"<p>",
        b"</p>",
        b"<script>",
        b"</script>",
        b"<style>",
        b"</style>",
        b"<!--",
        b"-->",
        b"<b>",
        b"&nbsp;",
        b"online casino ",
        b"jackpot ",
        b" poker",
        b"\xe8\xb5\x8c\xe5\x8d\x9a",
        b"\xe5",
        b'<meta charset="big5">',
        b"\xff\xfe",
        b"\xef\xbb\xbf",
        b"\x00",
        b"c a s i n o",
        b"ca\xe2\x80\x8bsino",
        b"padding padding padding ",
    ]
)
BODIES = st.one_of(
    st.binary(max_size=600),
    st.lists(st.one_of(FRAGMENTS, st.binary(max_size=8)), max_size=80).map(b"".join),
)
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            None,
            "text/html",
            "text/html; charset=utf-8",
            "text/html; charset=gbk",
            "text/html; charset=big5",
            "text/plain",
            "text/html; charset=utf-16",
            "text/plain; charset=utf-16-le",
        ]
    ),
    st.text(max_size=40),  # hostile headers
)


def _fed(classifier: Classifier, body: bytes, content_type: str | None, cuts: list[int]) -> Any:
    scan = classifier.scan(content_type)
    at = 0
    for cut in sorted(cuts):
        scan.feed(body[at:cut])
        at = max(at, cut)
    scan.feed(body[at:])
    return scan.finish()


@settings(max_examples=500, deadline=None)
@given(BODIES, CONTENT_TYPES, st.lists(st.integers(0, 700), max_size=12))
def test_any_chunking_gives_the_one_shot_result(
    body: bytes, content_type: str | None, cuts: list[int]
) -> None:
    whole = TINY.classify_body(body, content_type)
    assert _fed(TINY, body, content_type, cuts) == whole
    assert whole.score == sum(hit.contribution for hit in whole.evidence)
    if len(body) > TINY.max_scan_bytes:
        assert whole.truncated


WORDS = st.sampled_from(
    [
        "online",
        "casino",
        "jackpot",
        "poker",
        "roulette",
        "betting",
        "sports",
        "tomato",
        "garden",
        "porn",
        "xxx",
        "free",
        "hello",
        "news",
        "world",
    ]
)


def _counts(result: Classification) -> list[tuple[str, str, int, tuple[int, ...]]]:
    return sorted((h.phrase, h.kind, h.count, h.offsets) for h in result.evidence)


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS, max_size=120), st.lists(st.integers(0, 900), max_size=8))
def test_segments_find_what_one_pass_finds(words: list[str], cuts: list[int]) -> None:
    """Plain ASCII words, one space apart: the segments (cut at spaces, joined by a space)
    are the text one pass reads, so every phrase, count and offset must be the same —
    phrases across a cut included."""
    body = " ".join(words).encode()
    one = WHOLE.classify_body(body, "text/plain")
    many = _fed(TINY, body, "text/plain", cuts)
    assert _counts(many) == _counts(one)
    assert (many.verdict, many.score, dict(many.scores)) == (one.verdict, one.score, one.scores)
    assert many.chars == one.chars
    assert not many.truncated


def test_a_script_cut_in_two_stays_hidden() -> None:
    """A segment that ends inside ``<script>`` passes it on: the script's words are not
    text in the next segment either."""
    script = b"<script>var s = '" + b"online casino jackpot poker roulette " * 40 + b"';</script>"
    body = b"<html><body><p>tomato garden</p>" + script + b"<p>hello</p></body></html>"
    result = TINY.classify_body(body, "text/html")
    assert not result.blocked and result.score == 0, result.evidence
    assert WHOLE.classify_body(body, "text/html").score == 0


def test_memory_is_bounded_by_the_segment() -> None:
    """Fed 64 KB at a time, the scan holds at most a segment's worth of text."""
    classifier = Classifier(PHRASES, max_bytes=1 << 16, max_chars=1 << 16)
    scan = classifier.scan("text/html")
    chunk = b"<p>" + b"padding " * 8000 + b"</p>"
    for _ in range(64):  # 4 MB
        scan.feed(chunk)
        assert sum(map(len, scan._text)) <= 2 * len(chunk) + (1 << 16)
        assert scan._head_size <= (1 << 16) + len(chunk)
    scan.feed(b"<p>online casino jackpot roulette</p>")
    assert scan.finish().blocked
