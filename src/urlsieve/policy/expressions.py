"""Expression lists (UT1's ``expressions``, squidGuard's ``expressionlist``) under RE2.

Expression lists come from third parties, so they are never given to Python's
backtracking ``re``: each destination's expressions are compiled by RE2 (the
``google-re2`` bindings) into one automaton whose search time is linear in the
URL, whatever the patterns. They are POSIX extended expressions, matched without
case against the URL as Squid sent it, as squidGuard does. A line RE2 cannot compile
(a back-reference, a syntax error) is reported as ``file:line: reason`` and the other
lines still load.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from urlsieve.exceptions import ConfigError, RuleSyntaxError
from urlsieve.rules.load import read_list_text

__all__ = ["MAX_EXPRESSION", "ExpressionSet", "read_expressions"]

#: The longest expression read (characters); RE2 also caps each automaton's memory.
MAX_EXPRESSION = 4096
_MAX_MEMORY = 64 << 20


def _re2() -> Any:
    try:
        import re2
    except ImportError:  # pragma: no cover - google-re2 is a core dependency
        raise ConfigError("expression lists need RE2 bindings: pip install google-re2") from None
    return re2


def _options() -> Any:
    re2 = _re2()
    options = re2.Options()
    options.case_sensitive = False
    options.max_mem = _MAX_MEMORY
    return options


def search_spans(compiled: Any, text: str, pos: int = 0) -> list[tuple[int, int]] | None:
    """The spans (whole match, then each group; ``(-1, -1)`` for a group that did not take
    part) of the first match of an RE2 pattern in ``text`` at or after ``pos``, or None.
    The text before ``pos`` is context: ``^`` never matches at a ``pos`` past 0 (POSIX's
    REG_NOTBOL, as squidGuard's global substitution searches). ASCII text goes to RE2
    directly (the bindings' ``search`` maps offsets for any text, at twice the cost)."""
    if text.isascii():
        data = text.encode("ascii")
        spans: list[tuple[int, int]] = compiled._regexp.Match(_unanchored(), data, pos, len(data))
        return None if spans[0][0] < 0 else spans
    match = compiled.search(text, pos)
    if match is None:
        return None
    return [match.span(g) for g in range(len(match.groups()) + 1)]


def _unanchored() -> Any:
    return _re2()._re2.RE2.Anchor.UNANCHORED


def check_expression(pattern: str) -> str | None:
    """Why RE2 cannot compile ``pattern`` (None: it can)."""
    if len(pattern) > MAX_EXPRESSION:
        return f"expression longer than {MAX_EXPRESSION} characters"
    re2 = _re2()
    try:
        re2.compile(pattern, _options())
    except re2.error as exc:
        return f"not an expression RE2 can run: {exc}"
    return None


def read_expressions(path: str) -> tuple[list[tuple[str, int]], list[RuleSyntaxError]]:
    """The expressions of a list file as ``(pattern, line)``, and the lines skipped."""
    text = read_list_text(Path(path))
    good: list[tuple[str, int]] = []
    bad: list[RuleSyntaxError] = []
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        why = check_expression(line)
        if why is not None:
            bad.append(RuleSyntaxError(why, path, number))
            continue
        good.append((line, number))
    return good, bad


@dataclass
class ExpressionSet:
    """Per destination, its expressions compiled into one RE2 automaton."""

    patterns: Mapping[str, Iterable[str]]
    _compiled: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.patterns:
            return
        re2 = _re2()
        for name, patterns in self.patterns.items():
            alternatives = [f"(?:{p})" for p in patterns]
            if alternatives:
                self._compiled[name] = re2.compile("|".join(alternatives), _options())

    def __contains__(self, name: object) -> bool:
        return name in self._compiled

    def matches(self, name: str, url: str) -> bool:
        compiled = self._compiled.get(name)
        return compiled is not None and search_spans(compiled, url) is not None
