"""Evasions of the phrase lists (issue 30, item 6): dirty words split by invisible
characters, spelled with look-alike letters of other scripts, or letter-spaced. Each
evasion page scored 0 before the text was normalised for them; it must score as the plain
page does. The normalisation must leave the origin's pages as they were, and stay total,
idempotent and linear on any bytes."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.learn.origin import PAGES, load_test_phrases
from urlsieve.learn.classify import Classifier
from urlsieve.learn.text import decode, html_text, normalise, unconfuse

CLASSIFIER = Classifier(load_test_phrases())

PLAIN = (
    "<h1>Best online casino of 2026</h1><p>Win the jackpot at our online casino! Poker, "
    "roulette and sports betting with a casino welcome bonus.</p><p>Play poker and "
    "roulette now.</p>"
)
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff"]
#: Latin letters and a Cyrillic or Greek letter that looks the same.
LOOKALIKES = {
    "a": "\u0430",  # Cyrillic a
    "c": "\u0441",  # Cyrillic es
    "e": "\u0435",  # Cyrillic ie
    "i": "\u0456",  # Cyrillic byelorussian-ukrainian i
    "j": "\u0458",  # Cyrillic je
    "o": "\u03bf",  # Greek omicron
    "p": "\u0440",  # Cyrillic er
    "s": "\u0455",  # Cyrillic dze
    "x": "\u0445",  # Cyrillic ha
    "y": "\u0443",  # Cyrillic u
    "B": "\u0392",  # Greek Beta
    "P": "\u03a1",  # Greek Rho
    "W": "\u051c",  # Cyrillic we
}


def _in_text(change: Callable[[str], str]) -> Callable[[str], str]:
    """``change`` applied to every word of the text between the tags."""
    word = re.compile(r"[A-Za-z]{2,}")
    return lambda html: re.sub(
        r">([^<]+)<", lambda m: ">" + word.sub(lambda w: change(w.group()), m.group(1)) + "<", html
    )


def _zero_width(word: str) -> str:
    marks = itertools.cycle(INVISIBLE)
    return "".join(char + next(marks) for char in word[:-1]) + word[-1]


def _lookalike(word: str) -> str:
    return "".join(LOOKALIKES.get(char, char) for char in word)


def _spaced(separator: str) -> Callable[[str], str]:
    return separator.join


EVASIONS: dict[str, Callable[[str], str]] = {
    "zero-width": _in_text(_zero_width),
    "homoglyph": _in_text(_lookalike),
    "letter-spaced": _in_text(_spaced(" ")),
    "dotted": _in_text(_spaced(".")),
    "dashed": _in_text(_spaced("-")),
    "all-three": _in_text(lambda w: _zero_width(_lookalike(" ".join(w)))),
}


def _page(body: str) -> bytes:
    return f"<!DOCTYPE html><html><head><title>t</title></head><body>{body}</body></html>".encode()


@pytest.mark.parametrize("name", sorted(EVASIONS))
def test_an_evasion_page_scores_as_the_plain_page(name: str) -> None:
    plain = CLASSIFIER.classify_body(_page(PLAIN), "text/html; charset=utf-8")
    evaded_html = EVASIONS[name](PLAIN)
    assert evaded_html != PLAIN
    evaded = CLASSIFIER.classify_body(_page(evaded_html), "text/html; charset=utf-8")
    assert plain.blocked and plain.category == "gambling" and plain.score > 0
    assert (evaded.verdict, evaded.category, evaded.score) == (
        plain.verdict,
        plain.category,
        plain.score,
    ), (name, evaded.reason)
    assert [h.phrase for h in evaded.evidence] == [h.phrase for h in plain.evidence]


def test_lookalike_and_invisible_characters_are_gone_from_the_text() -> None:
    assert normalise("ca\u200bs\u00adi\u2060n\ufeffo") == "casino"
    assert normalise("\u0421\u0410\u0405\u0399\u039d\u039f") == "casino"  # upper-case Cyr/Greek
    assert normalise("c\u0430sin\u043e") == "casino"
    assert normalise("e\u200b\u0301") == "\u00e9"  # a mark joins its letter once alone
    # Chinese and Japanese are left as they were (their look-alikes are not of Latin).
    assert normalise("網上賭場 カジノ") == "网上赌场 カジノ"


def test_single_letters_that_spell_no_term_are_left_alone() -> None:
    text = normalise("u.s.a. a b c x y z 1 2 3, vitamin a b c")
    assert CLASSIFIER.join_spaced(text) == text
    assert CLASSIFIER.join_spaced("win at c a s i n o now") == "win at casino now"
    assert CLASSIFIER.join_spaced("x c.a.s.i.n.o y") == "x casino y"
    assert CLASSIFIER.join_spaced("o n l i n e c a s i n o") == "online casino"
    assert CLASSIFIER.join_spaced("a c a s i n o") == "a casino"


ORIGIN_PAGES = sorted(p for p, r in PAGES.items() if r.status == 200 and "text" in str(r.headers))


@pytest.mark.parametrize("path", ORIGIN_PAGES)
def test_the_new_steps_leave_the_origin_pages_as_they_were(path: str) -> None:
    """The clean and dirty pages of the tests score as before: on their text the new steps
    change nothing (invisible characters and look-alikes are not there, no letter-spaced
    term)."""
    route = PAGES[path]
    text, _ = decode(route.body, dict(route.headers).get("Content-Type"))
    text = html_text(text)
    assert unconfuse(text) == unicodedata.normalize("NFKC", text)
    normalised = normalise(text)
    assert CLASSIFIER.join_spaced(normalised) == normalised


# -- the normaliser on any bytes -----------------------------------------------------------

_HOSTILE = st.sampled_from(
    [*INVISIBLE, *LOOKALIKES.values(), " ", ".", "-", "a", "c", "\u0301", "\u0399", "國"]
)
_BYTES = st.one_of(
    st.binary(max_size=2000),
    st.lists(st.one_of(_HOSTILE, st.text(max_size=4)), max_size=300).map(
        lambda parts: "".join(parts).encode("utf-8", "surrogatepass")
    ),
)


@settings(max_examples=300, deadline=None)
@given(_BYTES, st.sampled_from([None, "text/html", "text/plain; charset=utf-8"]))
def test_normalise_never_raises_is_idempotent_and_linear_in_size(
    body: bytes, content_type: str | None
) -> None:
    text, _ = decode(body, content_type)
    once = normalise(text)
    assert (
        normalise(once) == once or "\ufffd" in once or any(0xD800 <= ord(c) < 0xE000 for c in text)
    )
    # NFKC may expand a character (at most 18 times, U+FDFA); casefold at most 3 times.
    assert len(once) <= 18 * 3 * len(text)
    joined = CLASSIFIER.join_spaced(once)
    assert len(joined) <= len(once)
    assert CLASSIFIER.join_spaced(joined) == joined
    result = CLASSIFIER.classify_body(body, content_type)
    assert result.score == sum(hit.contribution for hit in result.evidence)
