"""Rewrites: regular-expression substitutions applied to the URLs an ACL passes.

squidGuard's ``rew`` blocks hold ``s@pattern@replacement@flags`` lines: ``i`` ignores
case, ``r`` answers with a redirect (302) and ``R`` with a permanent one (301) instead
of rewriting the request in place. The first substitution whose pattern matches
applies, once. Patterns run under RE2 (linear time, see :mod:`.expressions`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from urlsieve.policy.expressions import _options, _re2, check_expression, search_spans
from urlsieve.policy.model import Rewrite, Substitution

__all__ = ["SAFE_SEARCH", "RewriteSet", "parse_substitution", "safe_search"]

#: Safe-search enforcement for the major search engines, as ufdbGuard offers: a search URL
#: gets the engine's strict-filter parameter (an existing one is overwritten). Each pair is
#: "replace the engine's own parameter" then "add it": the first that matches applies.
#: Over HTTPS a URL rewriter only sees these URLs when Squid bumps TLS (ssl_bump); DNS-level
#: enforcement (forcesafesearch.google.com, restrict.youtube.com) is the other way.
#: YouTube's Restricted Mode is a request header, which a URL rewriter cannot add: Squid
#: adds it (``request_header_add YouTube-Restrict strict youtube``; README, Policies).
SAFE_SEARCH: tuple[str, ...] = (
    # Google (any country domain): safe=active
    r"s@^(https?://(?:www\.)?google\.(?:com?\.)?[a-z]{2,3}/(?:search|images|webhp)\?(?:[^#]*&)?)safe=[^&#]*@\1safe=active@i",
    r"s@^(https?://(?:www\.)?google\.(?:com?\.)?[a-z]{2,3}/(?:search|images|webhp)\?)@\1safe=active&@i",
    # Bing: adlt=strict
    r"s@^(https?://(?:www\.)?bing\.com/(?:images/|videos/)?search\?(?:[^#]*&)?)adlt=[^&#]*@\1adlt=strict@i",
    r"s@^(https?://(?:www\.)?bing\.com/(?:images/|videos/)?search\?)@\1adlt=strict&@i",
    # DuckDuckGo: kp=1 (strict)
    r"s@^(https?://(?:html\.|lite\.)?duckduckgo\.com/(?:html/?|lite/?)?\?(?:[^#]*&)?)kp=[^&#]*@\1kp=1@i",
    r"s@^(https?://(?:html\.|lite\.)?duckduckgo\.com/(?:html/?|lite/?)?\?)@\1kp=1&@i",
    # Yahoo: vm=r
    r"s@^(https?://(?:[a-z]+\.)?search\.yahoo\.com/search\?(?:[^#]*&)?)vm=[^&#]*@\1vm=r@i",
    r"s@^(https?://(?:[a-z]+\.)?search\.yahoo\.com/search\?)@\1vm=r&@i",
    # Yandex: family=yes
    r"s@^(https?://(?:www\.)?yandex\.(?:com\.)?[a-z]{2,3}/(?:search|images/search)/?\?(?:[^#]*&)?)family=[^&#]*@\1family=yes@i",
    r"s@^(https?://(?:www\.)?yandex\.(?:com\.)?[a-z]{2,3}/(?:search|images/search)/?\?)@\1family=yes&@i",
)


def safe_search() -> tuple[Substitution, ...]:
    """:data:`SAFE_SEARCH`, parsed."""
    return tuple(parse_substitution(text) for text in SAFE_SEARCH)


def parse_substitution(text: str) -> Substitution:
    """``s@pattern@replacement@flags`` (any one character after ``s`` separates)."""
    if len(text) < 4 or text[0] != "s":
        raise ValueError(f"{text!r}: write s@pattern@replacement@flags")
    sep = text[1]
    parts = text[2:].split(sep)
    if len(parts) != 3:
        raise ValueError(f"{text!r}: expected three {sep!r}-separated fields after 's'")
    pattern, replacement, flags = parts
    if not pattern:
        raise ValueError(f"{text!r}: an empty pattern")
    unknown = set(flags) - set("irR")
    if unknown:
        raise ValueError(f"{text!r}: unknown flag(s) {''.join(sorted(unknown))} (use i, r, R)")
    why = check_expression(pattern)
    if why is not None:
        raise ValueError(f"{text!r}: {why}")
    redirect = 301 if "R" in flags else 302 if "r" in flags else None
    return Substitution(pattern, replacement, "i" in flags, redirect)


class RewriteSet:
    """Compiled rewrites by name."""

    def __init__(self, rewrites: Mapping[str, Rewrite]) -> None:
        self._compiled: dict[str, list[tuple[Any, list[str | int], int | None]]] = {}
        if not rewrites:
            return
        re2 = _re2()
        for name, rewrite in rewrites.items():
            compiled = []
            for sub in rewrite.substitutions:
                options = _options()
                options.case_sensitive = not sub.ignore_case
                compiled.append(
                    (re2.compile(sub.pattern, options), _replacement(sub.replacement), sub.redirect)
                )
            self._compiled[name] = compiled

    def apply(self, name: str, url: str) -> tuple[str, int | None] | None:
        """The rewritten URL and its redirect status (None: rewrite in place), or None when
        no substitution of the rewrite matches."""
        for pattern, replacement, status in self._compiled.get(name, ()):
            spans = search_spans(pattern, url)
            if spans is not None:
                start, end = spans[0]
                new = url[:start] + _expand(replacement, url, spans) + url[end:]
                return (new, status) if new != url else None  # already as wanted
        return None


def _replacement(text: str) -> list[str | int]:
    """The replacement cut into literal text and group numbers: ``\\1`` … ``\\9`` insert a
    group, any other ``\\x`` is ``x`` (squidGuard's ``\\&`` is a literal ``&``)."""
    out: list[str | int] = []
    for m in re.finditer(r"\\(.)|[^\\]+|\\$", text, re.DOTALL):
        escaped = m.group(1)
        if escaped is not None and escaped.isdigit():
            out.append(int(escaped))
        else:
            out.append(escaped if escaped is not None else m.group())
    return out


def _expand(replacement: list[str | int], text: str, spans: list[tuple[int, int]]) -> str:
    """The replacement with each group number replaced by the group's text ("" for a
    group that does not exist or did not take part)."""
    parts = []
    for piece in replacement:
        if isinstance(piece, int):
            if piece < len(spans) and spans[piece][0] >= 0:
                start, end = spans[piece]
                parts.append(text[start:end])
        else:
            parts.append(piece)
    return "".join(parts)
