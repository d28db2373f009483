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

from urlsieve.policy.expressions import _options, _re2, check_expression
from urlsieve.policy.model import Rewrite, Substitution

__all__ = ["RewriteSet", "parse_substitution"]


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
            match = pattern.search(url)
            if match is not None:
                start, end = match.span()
                return url[:start] + _expand(replacement, match) + url[end:], status
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


def _expand(replacement: list[str | int], match: Any) -> str:
    parts = []
    for piece in replacement:
        if isinstance(piece, int):
            try:
                parts.append(match.group(piece) or "")
            except (IndexError, ValueError):
                parts.append("")
        else:
            parts.append(piece)
    return "".join(parts)
