r"""Rewrites: regular-expression substitutions applied to the URLs an ACL passes.

squidGuard's ``rew`` blocks hold ``s@pattern@replacement@flags`` lines, read as its
``sgRewriteSubstitute`` reads them: the pattern ends at the first separator without a
backslash before it, the flags follow the last one, and the replacement (which may hold
the separator) is what lies between. Flags: ``i`` (or ``I``) ignores case, ``r`` answers
with a redirect (302) and ``R`` with a permanent one (301) instead of rewriting the
request in place, ``g`` replaces every match (later matches never at ``^``), not only the
first. In the replacement ``\1`` … ``\9`` insert a group, ``&`` the whole match, and a
backslash makes any other character literal (``\&``). The first substitution whose
pattern matches applies. Patterns run under RE2 (linear time, see :mod:`.expressions`);
a ``g`` substitution makes at most :data:`MAX_REPLACEMENTS` replacements in one URL.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any

from urlsieve.policy.expressions import _options, _re2, check_expression, search_spans
from urlsieve.policy.model import Rewrite, Substitution

__all__ = [
    "MAX_REPLACEMENTS",
    "SAFE_SEARCH",
    "RewriteSet",
    "parse_substitution",
    "required_literal",
    "safe_search",
]

#: Replacements a ``g`` substitution makes in one URL at most (each costs a search of the
#: rest of the URL: the cap keeps a hostile URL's rewrite linear in its length).
MAX_REPLACEMENTS = 256

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
    r"s@^(https?://(?:www\.)?google\.(?:com?\.)?[a-z]{2,3}/(?:search|images|webhp)\?)@\1safe=active\&@i",
    # Bing: adlt=strict
    r"s@^(https?://(?:www\.)?bing\.com/(?:images/|videos/)?search\?(?:[^#]*&)?)adlt=[^&#]*@\1adlt=strict@i",
    r"s@^(https?://(?:www\.)?bing\.com/(?:images/|videos/)?search\?)@\1adlt=strict\&@i",
    # DuckDuckGo: kp=1 (strict)
    r"s@^(https?://(?:html\.|lite\.)?duckduckgo\.com/(?:html/?|lite/?)?\?(?:[^#]*&)?)kp=[^&#]*@\1kp=1@i",
    r"s@^(https?://(?:html\.|lite\.)?duckduckgo\.com/(?:html/?|lite/?)?\?)@\1kp=1\&@i",
    # Yahoo: vm=r
    r"s@^(https?://(?:[a-z]+\.)?search\.yahoo\.com/search\?(?:[^#]*&)?)vm=[^&#]*@\1vm=r@i",
    r"s@^(https?://(?:[a-z]+\.)?search\.yahoo\.com/search\?)@\1vm=r\&@i",
    # Yandex: family=yes
    r"s@^(https?://(?:www\.)?yandex\.(?:com\.)?[a-z]{2,3}/(?:search|images/search)/?\?(?:[^#]*&)?)family=[^&#]*@\1family=yes@i",
    r"s@^(https?://(?:www\.)?yandex\.(?:com\.)?[a-z]{2,3}/(?:search|images/search)/?\?)@\1family=yes\&@i",
)


def safe_search() -> tuple[Substitution, ...]:
    """:data:`SAFE_SEARCH`, parsed."""
    return tuple(parse_substitution(text) for text in SAFE_SEARCH)


def parse_substitution(text: str) -> Substitution:
    """``s@pattern@replacement@flags`` (any one character after ``s`` separates), split as
    squidGuard splits it (see the module)."""
    if len(text) < 4 or text[0] != "s":
        raise ValueError(f"{text!r}: write s@pattern@replacement@flags")
    sep = text[1]
    body = text[2:]
    cut = body.find(sep)
    while cut > 0 and body[cut - 1] == "\\":  # an escaped separator is the pattern's
        cut = body.find(sep, cut + 1)
    last = body.rfind(sep)
    if cut < 0 or last == cut:
        raise ValueError(f"{text!r}: expected three {sep!r}-separated fields after 's'")
    pattern, replacement, flags = body[:cut], body[cut + 1 : last], body[last + 1 :]
    if not pattern:
        raise ValueError(f"{text!r}: an empty pattern")
    unknown = set(flags) - set("girRI")
    if unknown:
        raise ValueError(f"{text!r}: unknown flag(s) {''.join(sorted(unknown))} (use i, g, r, R)")
    why = check_expression(pattern)
    if why is not None:
        raise ValueError(f"{text!r}: {why}")
    redirect = 301 if "R" in flags else 302 if "r" in flags else None
    ignore_case = "i" in flags or "I" in flags
    return Substitution(pattern, replacement, ignore_case, redirect, every="g" in flags)


# Python's own regular-expression parser (no stubs: read as Any).
_sre: Any = importlib.import_module("re._constants")
_sre_parse: Any = importlib.import_module("re._parser")

#: A required literal is cut to this many bytes (any part of it is required too): the
#: compiled prefilter's search stays linear in the URL.
MAX_NEEDLE = 32


def required_literal(pattern: str) -> bytes | None:
    """A lower-case ASCII string that every text ``pattern`` matches holds, compared
    ignoring case (the longest run of literal characters the match cannot skip, at most
    :data:`MAX_NEEDLE` bytes), or None when there is none or the pattern is not read
    here. What it tells: a URL without it (in any case) is not rewritten, so the compiled
    policy batch (``policy_decide``) skips the RE2 search for such URLs.

    Read with Python's own regular-expression parser, conservatively: only literals in
    sequence at the top, in groups and in repeats of at least one count; alternatives,
    classes, optional parts and anything that parser reads otherwise than RE2 would
    (its errors) give nothing."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError, ValueError):
        return None
    best = ""

    def walk(items: Any) -> None:
        nonlocal best
        run: list[str] = []

        def flush() -> None:
            nonlocal best
            text = "".join(run)
            if len(text) > len(best):
                best = text
            run.clear()

        for op, av in items:
            if op is _sre.LITERAL and av < 128:
                run.append(chr(av).lower())
                continue
            flush()
            if op is _sre.SUBPATTERN:
                walk(av[-1])
            elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT) and av[0] >= 1:
                walk(av[2])
        flush()

    walk(parsed)
    return best[:MAX_NEEDLE].encode("ascii") if best else None


class RewriteSet:
    """Compiled rewrites by name."""

    def __init__(self, rewrites: Mapping[str, Rewrite]) -> None:
        self._compiled: dict[str, list[tuple[Any, list[str | int], int | None, bool]]] = {}
        self._needles: dict[str, tuple[bytes, ...]] = {}
        if not rewrites:
            return
        re2 = _re2()
        for name, rewrite in rewrites.items():
            compiled = []
            for sub in rewrite.substitutions:
                options = _options()
                options.case_sensitive = not sub.ignore_case
                pattern = re2.compile(sub.pattern, options)
                compiled.append((pattern, _replacement(sub.replacement), sub.redirect, sub.every))
            self._compiled[name] = compiled
            needles = [required_literal(sub.pattern) for sub in rewrite.substitutions]
            self._needles[name] = tuple(n for n in needles if n is not None)
            if None in needles:  # a substitution without one: any URL may be rewritten
                self._needles[name] = ()

    def needles(self, name: str) -> tuple[bytes, ...]:
        """Strings one of which (ignoring case) a URL the rewrite ``name`` changes holds
        (:func:`required_literal` of each substitution); empty when some substitution has
        none (then no URL can be passed over without trying the rewrite)."""
        return self._needles.get(name, ())

    def apply(self, name: str, url: str) -> tuple[str, int | None] | None:
        """The rewritten URL and its redirect status (None: rewrite in place), or None when
        no substitution of the rewrite matches."""
        for pattern, replacement, status, every in self._compiled.get(name, ()):
            spans = search_spans(pattern, url)
            if spans is not None:
                new = _substitute(pattern, replacement, url, spans, every)
                return (new, status) if new != url else None  # already as wanted
        return None


def _substitute(
    pattern: Any, replacement: list[str | int], url: str, spans: list[tuple[int, int]], every: bool
) -> str:
    """``url`` with its first match (``spans``) replaced and, with ``every``, each later one
    (searched after the last, ``^`` never matching there; an empty match moves one
    character on), up to :data:`MAX_REPLACEMENTS`."""
    parts = []
    done = 0  # url[:done] is written
    for _ in range(MAX_REPLACEMENTS):
        start, end = spans[0]
        parts.append(url[done:start])
        parts.append(_expand(replacement, url, spans))
        done = end
        if not every:
            break
        following = end if end > start else end + 1
        if following > len(url):
            break
        if end == start:  # an empty match: keep the character it stood before
            parts.append(url[end:following])
            done = following
        found = search_spans(pattern, url, following)
        if found is None:
            break
        spans = found
    parts.append(url[done:])
    return "".join(parts)


def _replacement(text: str) -> list[str | int]:
    """The replacement cut into literal text and group numbers, as squidGuard reads it:
    ``\\1`` … ``\\9`` insert a group, ``&`` the whole match (group 0), any other ``\\x`` is
    ``x`` (``\\&`` is a literal ``&``)."""
    out: list[str | int] = []
    for m in re.finditer(r"\\(.)|&|[^\\&]+|\\$", text, re.DOTALL):
        escaped = m.group(1)
        if m.group() == "&":
            out.append(0)
        elif escaped is not None and escaped.isdigit():
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
