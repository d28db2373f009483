"""Hostile page bodies: the classifier never raises and is deterministic."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from urlsieve.learn.classify import Classifier
from urlsieve.learn.phrases import PhraseSet
from urlsieve.learn.text import decode, normalise

DATA = Path(__file__).parent / "data" / "phrases"
CLASSIFIER = Classifier(
    PhraseSet.load(
        weighted=[DATA / "weightedphraselist"],
        banned=[DATA / "bannedphraselist"],
        exception=[DATA / "exceptionphraselist"],
        lexicons=[(DATA / "lexicon_zh.txt", "gambling", 30)],
    ),
    max_bytes=4096,
    max_chars=2048,
)

FRAGMENTS = st.sampled_from(
    [
        b"<p>",
        b"</p>",
        b"<script>",
        b"</script>",
        b"<b>",
        b"&#x8D4C;",
        b"&nbsp;",
        b"&#",
        b"online casino",
        b"\xe8\xb5\x8c\xe5\x8d\x9a",
        b'<meta charset="big5">',
        b'<meta charset="utf-16">',
        b"<!--",
        b"\xff\xfe",
        b"\xef\xbb\xbf",
        b"\x00",
        b"jackpot",
    ]
)
BODIES = st.one_of(
    st.binary(max_size=2000),
    st.lists(st.one_of(FRAGMENTS, st.binary(max_size=8)), max_size=60).map(b"".join),
)
CONTENT_TYPES = st.sampled_from(
    [
        None,
        "text/html",
        "text/html; charset=gbk",
        "text/html; charset=big5",
        "text/plain",
        "text/html; charset=nonsense",
        "text/html; charset=utf-16",
        "application/octet-stream",
        'text/html; charset="x\xff"',
    ]
)


@settings(max_examples=400, deadline=None)
@given(BODIES, CONTENT_TYPES)
def test_any_body_classifies_deterministically(body: bytes, content_type: str | None) -> None:
    first = CLASSIFIER.classify_body(body, content_type)
    again = CLASSIFIER.classify_body(body, content_type)
    assert first == again
    assert first.verdict in ("block", "allow")
    assert first.chars <= 2048
    assert first.score == sum(hit.contribution for hit in first.evidence)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_any_text_classifies_and_normalise_is_idempotent(text: str) -> None:
    result = CLASSIFIER.classify_text(text)
    assert result == CLASSIFIER.classify_text(text)
    once = normalise(text)
    assert (
        normalise(once) == once or "\ufffd" in once or any(0xD800 <= ord(c) < 0xE000 for c in text)
    )


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1000), CONTENT_TYPES)
def test_decode_never_raises(body: bytes, content_type: str | None) -> None:
    text, charset = decode(body, content_type)
    assert isinstance(text, str) and charset
