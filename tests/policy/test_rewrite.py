"""Substitutions read and applied as squidGuard's sgRewriteSubstitute/sgRegExpSubst do:
the split at the first unescaped separator and the last one, the flags i/I/g/r/R, ``&``
for the whole match, ``g`` for every match (``^`` only at the start); linear on hostile
URLs. The real squidGuard agrees on the differential policy's ``s@(/zz)@/y&@g``
(tests/policy/test_squidguard_differential.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from urlsieve.policy.model import Rewrite
from urlsieve.policy.rewrite import MAX_REPLACEMENTS, RewriteSet, parse_substitution, safe_search


def apply(text: str, url: str) -> tuple[str, int | None] | None:
    rewrites = RewriteSet({"r": Rewrite("r", (parse_substitution(text),))})
    return rewrites.apply("r", url)


@pytest.mark.parametrize(
    ("text", "pattern", "replacement", "flags"),
    [
        ("s@a@b@", "a", "b", (False, None, False)),
        ("s@a@b@iI", "a", "b", (True, None, False)),
        ("s@a@b@I", "a", "b", (True, None, False)),
        ("s@a@b@g", "a", "b", (False, None, True)),
        ("s@a@b@gr", "a", "b", (False, 302, True)),
        ("s@a@b@R", "a", "b", (False, 301, False)),
        ("s@a\\@b@c@", "a\\@b", "c", (False, None, False)),  # an escaped separator
        ("s@a@b@c@i", "a", "b@c", (True, None, False)),  # the last separator ends it
        ("s|a|b|g", "a", "b", (False, None, True)),
    ],
)
def test_split_and_flags(
    text: str, pattern: str, replacement: str, flags: tuple[bool, int | None, bool]
) -> None:
    sub = parse_substitution(text)
    assert (sub.pattern, sub.replacement) == (pattern, replacement)
    assert (sub.ignore_case, sub.redirect, sub.every) == flags


@pytest.mark.parametrize("text", ["s@a@b@x", "s@a@b", "s@@b@", "x@a@b@", "s@a(@b@"])
def test_unreadable_substitutions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_substitution(text)


@pytest.mark.parametrize(
    ("text", "url", "want"),
    [
        ("s@(/zz)@/y&@g", "http://a.test/zz/a/zz/b", "http://a.test/y/zz/a/y/zz/b"),
        ("s@(/zz)@/y&@", "http://a.test/zz/a/zz/b", "http://a.test/y/zz/a/zz/b"),
        ("s@(/zz)@/y\\&@", "http://a.test/zz/b", "http://a.test/y&/b"),  # \& is literal
        ("s@/(z+)@/\\1\\1@g", "http://a.test/z/zz", "http://a.test/zz/zzzz"),
        ("s@^(h)@H@g", "http://a.test/h/h", "Http://a.test/h/h"),  # ^ only at the start
        ("s@Z@q@gi", "http://a.test/zZ", "http://a.test/qq"),
        ("s@x*@-@g", "abxc", "-a-b--c-"),  # empty matches move on (as Python's re.sub)
    ],
)
def test_every_match_and_the_whole_match(text: str, url: str, want: str) -> None:
    done = apply(text, url)
    assert done is not None and done[0] == want


def test_a_substitution_that_changes_nothing_is_no_rewrite() -> None:
    assert apply("s@(a)@&@g", "http://a.test/a") is None


def test_safe_search_adds_its_parameter_with_a_literal_ampersand() -> None:
    rewrites = RewriteSet({"s": Rewrite("s", safe_search())})
    done = rewrites.apply("s", "https://www.google.com/search?q=x")
    assert done == ("https://www.google.com/search?safe=active&q=x", None)


def test_a_global_substitution_is_capped() -> None:
    """A URL of 64 Ki matches gets at most MAX_REPLACEMENTS (each one searches the rest of
    the URL: the cap keeps the work linear in the URL's length); the rest is kept."""
    done = apply("s@a@b@g", "http://x.test/" + "a" * 65_536)
    assert done is not None
    assert done[0].count("b") == MAX_REPLACEMENTS
    assert done[0].endswith("a" * (65_536 - MAX_REPLACEMENTS))


@given(st.text(alphabet="az/^&", max_size=60))
def test_global_substitution_agrees_with_pythons_re(url: str) -> None:
    """Where Python's re and squidGuard agree (a pattern without ^, no empty match), the g
    flag gives re.sub's answer, with & as the whole match."""
    done = apply("s@(a+)@<&>@g", url)
    want = re.sub("(a+)", r"<\g<0>>", url)
    assert (done[0] if done else url) == want
