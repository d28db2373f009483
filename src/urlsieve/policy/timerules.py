"""Time rules: weekly ranges and dates, checked against a clock in one time zone.

A time rule is squidGuard's ``time`` block::

    weekly mtwhf 08:00-12:00 13:00-16:00     # day letters: s m t w h f a, or names, or *
    weekly saturdays sundays                  # a whole day
    date 2026.05.01                           # a whole date
    date *.12.24 12:00-23:59                  # * for any year, month or day
    date 2026.07.01-2026.08.31                # a range of dates

A rule holds when *any* of its entries holds. A range ``hh:mm-hh:mm`` holds from
its first minute up to, not including, its last (squidGuard's ``08:00-12:00``
ends when 12:00 begins); ``00:00-24:00`` is the whole day. A range must end after
it starts: a range over midnight is two ranges (``22:00-24:00`` and ``00:00-06:00``
on the next day's line), and saying so at compile time beats a rule that never holds.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

__all__ = ["DAY_LETTERS", "DateEntry", "TimeRule", "WeeklyEntry", "parse_days", "parse_ranges"]

#: squidGuard's day letters, Monday first (``datetime.weekday()`` order).
DAY_LETTERS = "mtwhfas"
_DAY_NAMES = {
    name: i
    for i, names in enumerate(
        (
            ("mon", "monday", "mondays"),
            ("tue", "tuesday", "tuesdays"),
            ("wed", "wednesday", "wednesdays"),
            ("thu", "thursday", "thursdays"),
            ("fri", "friday", "fridays"),
            ("sat", "saturday", "saturdays"),
            ("sun", "sunday", "sundays"),
        )
    )
    for name in names
}
_RANGE = re.compile(r"([0-9]{1,2}):([0-9]{2})-([0-9]{1,2}):([0-9]{2})")
_DATE = re.compile(r"(\*|[0-9]{4})[.-](\*|[0-9]{1,2})[.-](\*|[0-9]{1,2})")
_WHOLE_DAY = ((0, 24 * 60),)


class TimeSyntaxError(ValueError):
    """A day list, range or date that cannot be read (the caller adds file and line)."""


def parse_days(tokens: Sequence[str]) -> frozenset[int]:
    """Day letters (``mtwhf``), names (``mondays``), ``*`` (every day) → weekday numbers."""
    days: set[int] = set()
    for token in tokens:
        word = token.lower()
        if word in ("*", "all"):
            days.update(range(7))
        elif word in _DAY_NAMES:
            days.add(_DAY_NAMES[word])
        elif word and all(c in DAY_LETTERS for c in word):
            days.update(DAY_LETTERS.index(c) for c in word)
        else:
            raise TimeSyntaxError(
                f"{token!r} is not a day list: use letters of 'smtwhfa' "
                "(s=Sunday … a=Saturday), day names such as 'mondays', or '*'"
            )
    return frozenset(days)


def parse_ranges(tokens: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """``hh:mm-hh:mm`` tokens → ``(first minute, end minute)`` pairs, checked."""
    out: list[tuple[int, int]] = []
    for token in tokens:
        m = _RANGE.fullmatch(token)
        if m is None:
            raise TimeSyntaxError(f"{token!r} is not a time range: write hh:mm-hh:mm")
        h1, m1, h2, m2 = map(int, m.groups())
        if h1 > 23 or m1 > 59 or h2 > 24 or m2 > 59 or (h2 == 24 and m2):
            raise TimeSyntaxError(f"{token!r}: no such time of day")
        start, end = h1 * 60 + m1, h2 * 60 + m2
        if end <= start:
            raise TimeSyntaxError(
                f"{token!r} ends before it starts: a range over midnight is two ranges "
                "(…-24:00, then 00:00-… on the next day)"
            )
        out.append((start, end))
    out.sort()
    for (a_start, a_end), (b_start, _) in itertools.pairwise(out):
        if b_start < a_end:
            raise TimeSyntaxError(
                f"time ranges overlap ({_hhmm(a_start)}-{_hhmm(a_end)} and {_hhmm(b_start)}-…): "
                "merge them"
            )
    return tuple(out) or _WHOLE_DAY


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _in(ranges: tuple[tuple[int, int], ...], minute: int) -> bool:
    return any(start <= minute < end for start, end in ranges)


@dataclass(frozen=True)
class WeeklyEntry:
    days: frozenset[int]
    ranges: tuple[tuple[int, int], ...] = _WHOLE_DAY

    @classmethod
    def parse(cls, words: Sequence[str]) -> WeeklyEntry:
        """``mtwhf 08:00-12:00 13:00-16:00``: day words, then ranges (none: the whole day)."""
        days = [w for w in words if ":" not in w]
        if not days:
            raise TimeSyntaxError("'weekly' needs days (e.g. 'mtwhf 08:00-16:00' or mondays)")
        return cls(parse_days(days), parse_ranges([w for w in words if ":" in w]))

    def holds(self, now: datetime) -> bool:
        return now.weekday() in self.days and _in(self.ranges, now.hour * 60 + now.minute)

    def __str__(self) -> str:
        days = "".join(c for i, c in enumerate(DAY_LETTERS) if i in self.days)
        return f"weekly {days} {_ranges_text(self.ranges)}".rstrip()


@dataclass(frozen=True)
class DateEntry:
    """One date (fields ``None`` for ``*``) or a range of whole dates, with time ranges."""

    year: int | None
    month: int | None
    day: int | None
    until: date | None = None  # set: a range from (year, month, day) to this date
    ranges: tuple[tuple[int, int], ...] = _WHOLE_DAY

    @classmethod
    def parse(cls, text: str, ranges: Sequence[str] = ()) -> DateEntry:
        spans = parse_ranges(ranges)
        first, sep, last = text.partition("-") if text.count("-") == 1 else (text, "", "")
        if "-" in text and not sep:
            raise TimeSyntaxError(f"{text!r}: write a date as yyyy.mm.dd (a range as a-b)")
        year, month, day = _date_fields(first)
        if not sep:
            return cls(year, month, day, None, spans)
        if None in (year, month, day):
            raise TimeSyntaxError(f"{text!r}: a date range takes whole dates, without '*'")
        end_fields = _date_fields(last)
        if None in end_fields:
            raise TimeSyntaxError(f"{text!r}: a date range takes whole dates, without '*'")
        start, end = date(year, month, day), date(*end_fields)  # type: ignore[arg-type]
        if end < start:
            raise TimeSyntaxError(f"{text!r}: the range ends before it starts")
        return cls(year, month, day, end, spans)

    def holds(self, now: datetime) -> bool:
        today = now.date()
        if self.until is not None:
            start = date(self.year, self.month, self.day)  # type: ignore[arg-type]
            if not start <= today <= self.until:
                return False
        elif (
            (self.year is not None and self.year != today.year)
            or (self.month is not None and self.month != today.month)
            or (self.day is not None and self.day != today.day)
        ):
            return False
        return _in(self.ranges, now.hour * 60 + now.minute)

    def __str__(self) -> str:
        def f(v: int | None, width: int) -> str:
            return "*" if v is None else f"{v:0{width}d}"

        text = f"{f(self.year, 4)}.{f(self.month, 2)}.{f(self.day, 2)}"
        if self.until is not None:
            text += f"-{self.until:%Y.%m.%d}"
        return f"date {text} {_ranges_text(self.ranges)}".rstrip()


def _ranges_text(ranges: tuple[tuple[int, int], ...]) -> str:
    if ranges == _WHOLE_DAY:
        return ""
    return " ".join(f"{_hhmm(a)}-{_hhmm(b)}" for a, b in ranges)


def _date_fields(text: str) -> tuple[int | None, int | None, int | None]:
    m = _DATE.fullmatch(text)
    if m is None:
        raise TimeSyntaxError(f"{text!r} is not a date: write yyyy.mm.dd ('*' for any field)")
    year, month, day = (None if g == "*" else int(g) for g in m.groups())
    if month is not None and not 1 <= month <= 12:
        raise TimeSyntaxError(f"{text!r}: no month {month}")
    if day is not None and not 1 <= day <= 31:
        raise TimeSyntaxError(f"{text!r}: no day {day}")
    if None not in (year, month, day):
        try:
            date(year, month, day)  # type: ignore[arg-type]
        except ValueError as exc:
            raise TimeSyntaxError(f"{text!r}: {exc}") from None
    return year, month, day


@dataclass(frozen=True)
class TimeRule:
    """A named time rule: it holds when any of its entries holds."""

    name: str
    entries: tuple[WeeklyEntry | DateEntry, ...]

    def holds(self, now: datetime) -> bool:
        return any(entry.holds(now) for entry in self.entries)
