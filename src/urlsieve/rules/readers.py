"""List formats → rules, each bad line reported as ``source:line: reason`` and skipped.

Every reader is a *line parser* (one line → rules, ``[]`` for a comment,
:class:`RuleSyntaxError` for a bad line) run by one driver,
:func:`read_lines`, which counts every line into a :class:`ListReport`:

    lines = rule_lines + comments + ignored + skipped
    loaded + duplicates = rules read (a hosts line can name several hosts)

``skipped`` lines each have a warning in ``report.warnings``; ``ignored``
lines are hosts-file boilerplate (``127.0.0.1 localhost``). With
``strict=True`` the first bad line raises instead.
"""

from __future__ import annotations

import csv
import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from urlsieve.exceptions import RuleSyntaxError
from urlsieve.rules.model import ALLOW, Rule, RuleKey, parse_rule

__all__ = [
    "CsvLine",
    "FORMATS",
    "IGNORED",
    "MAX_LINE_LENGTH",
    "LineContext",
    "LineParser",
    "ListReport",
    "RuleList",
    "RuleSink",
    "TEXT_MODES",
    "TextSink",
    "adblock_line",
    "hosts_line",
    "plain_line",
    "read_lines",
    "read_text",
    "sniff_format",
    "strip_comment",
]

#: The longest list line read (characters); a longer one is reported ``file:line`` and skipped.
MAX_LINE_LENGTH = 65_536

#: Returned by a line parser for a line that is valid but carries no rule (hosts boilerplate).
IGNORED: list[Rule] = []


@dataclass
class ListReport:
    """What happened to every line of one list file."""

    source: str
    format: str
    category: str
    action: str
    lines: int = 0
    rule_lines: int = 0
    loaded: int = 0
    duplicates: int = 0
    comments: int = 0
    ignored: int = 0
    skipped: int = 0
    warnings: list[RuleSyntaxError] = field(default_factory=list)
    note: str = ""
    #: ``file:line: text`` for each line read in a way worth knowing (loaded all the same).
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: ``source (format, category, action): N loaded, …``."""
        parts = [f"{self.loaded} loaded"]
        if self.loaded + self.duplicates != self.rule_lines:
            parts[0] += f" (from {self.rule_lines} lines)"
        for name in ("duplicates", "comments", "ignored", "skipped"):
            value = getattr(self, name)
            if value:
                parts.append(f"{value} {name}")
        head = f"{self.source} ({self.format}, {self.category}, {self.action})"
        return (
            f"{head}: {self.lines} lines: "
            + ", ".join(parts)
            + (f" ({self.note})" if self.note else "")
        )


@dataclass(frozen=True)
class LineContext:
    """What a line parser needs besides the line: default action, category, source."""

    action: str
    category: str
    source: str
    #: Where a parser says ``file:line: text`` about a line it reads all the same.
    notes: list[str] = field(default_factory=list)


LineParser = Callable[[str, int, LineContext], list[Rule]]


def strip_comment(text: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` after whitespace) and outer blanks."""
    at = text.find("#")
    if at == 0:
        return ""
    if at > 0 and text[at - 1] in " \t":
        text = text[:at]
    return text.strip()


def plain_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    """One pattern per line; ``#`` comments; ``@@pattern`` is an allow rule."""
    text = strip_comment(text)
    if not text:
        return []
    action = ctx.action
    if text.startswith("@@"):
        text, action = text[2:], ALLOW
    return [parse_rule(text, action, ctx.category, ctx.source, number)]


# Names a hosts file maps to itself: not rules.
_HOSTS_BOILERPLATE = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "local",
        "broadcasthost",
        "ip6-localhost",
        "ip6-loopback",
        "ip6-localnet",
        "ip6-mcastprefix",
        "ip6-allnodes",
        "ip6-allrouters",
        "ip6-allhosts",
        "0.0.0.0",
    }
)


def _is_address(token: str) -> bool:
    try:
        ipaddress.ip_address(token)
    except ValueError:
        return False
    return True


def hosts_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    """``ADDRESS host [host…]`` (``0.0.0.0``, ``127.0.0.1``, ``::1``…) or a bare host per line."""
    text = strip_comment(text)
    if not text:
        return []
    tokens = text.split()
    if len(tokens) > 1:
        if not _is_address(tokens[0]):
            raise RuleSyntaxError(
                f"expected 'ADDRESS host…', and {tokens[0]!r} is not an address",
                ctx.source,
                number,
            )
        tokens = tokens[1:]
    names = [t for t in tokens if t.lower() not in _HOSTS_BOILERPLATE]
    if not names:
        return IGNORED
    return [parse_rule(n, ctx.action, ctx.category, ctx.source, number) for n in names]


# Adblock options that do not narrow which requests a network rule applies to.
_ADBLOCK_HARMLESS = frozenset({"all", "document", "doc", "important", "popup"})
_ADBLOCK_COSMETIC = re.compile(r"#[@?$%]?#|#\+js\(")


def adblock_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    """The simple network subset of Adblock syntax.

    ``||host^``, ``||host/path^`` and ``||host/path`` (read at segment
    boundaries), a bare host name (read as ``||host^``, as uBlock Origin
    does), ``@@`` exceptions and the options ``$all``, ``$document``,
    ``$important``, ``$popup``. Anything else (other options, wildcards,
    regular expressions, cosmetic filters) is reported and skipped.
    """
    text = text.strip()
    if not text or text.startswith("!") or (text.startswith("[") and text.endswith("]")):
        return []
    if text.startswith("#") and not _ADBLOCK_COSMETIC.match(text):
        return []  # hosts-style comment some lists carry
    if _ADBLOCK_COSMETIC.search(text):
        raise RuleSyntaxError("cosmetic filter, not a network rule", ctx.source, number)
    action = ctx.action
    body = text
    if body.startswith("@@"):
        body, action = body[2:], ALLOW
    if "$" in body:
        body, _, options = body.partition("$")
        unsupported = [o for o in options.split(",") if o.strip().lower() not in _ADBLOCK_HARMLESS]
        if unsupported:
            raise RuleSyntaxError(
                f"unsupported option(s) ${','.join(unsupported)}: the rule would apply more "
                "widely than written",
                ctx.source,
                number,
            )
    if body.startswith("||"):
        body = body[2:]
    elif body.startswith(("|", "/")):
        raise RuleSyntaxError(
            "only '||host…' rules are supported (URL-start anchors and regexes are not)",
            ctx.source,
            number,
        )
    if body.endswith("^|"):
        body = body[:-1]
    if body.endswith("^"):
        body = body[:-1]
    if "*" in body or "^" in body:
        raise RuleSyntaxError("wildcards and inner '^' are not supported", ctx.source, number)
    if not body:
        raise RuleSyntaxError("empty rule", ctx.source, number)
    return [parse_rule(body, action, ctx.category, ctx.source, number)]


#: Where a reader puts each rule: returns True when the rule is new, False for a duplicate.
RuleSink = Callable[[Rule], bool]


class RuleList:
    """The default sink: a list of rules, a rule whose key and action were seen dropped."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self._seen: dict[RuleKey, str] = {}

    def __call__(self, rule: Rule) -> bool:
        key = rule.key
        if self._seen.get(key) == rule.action:
            return False
        self._seen[key] = rule.action
        self.rules.append(rule)
        return True


def read_lines(
    lines: Iterable[str],
    parse: LineParser,
    report: ListReport,
    sink: RuleSink,
    *,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Run ``parse`` over ``lines``, counting into ``report`` and handing rules to ``sink``.

    A rule the sink already had (same key and action) counts as a duplicate.
    ``progress`` is called with the number of characters read, every 16384 lines.
    """
    ctx = LineContext(report.action, report.category, report.source, report.notes)
    chars = 0
    for number, raw in enumerate(lines, 1):
        text = raw[1:] if number == 1 and raw.startswith("\ufeff") else raw
        if progress is not None:
            chars += len(raw)
            if number & 0x3FFF == 0:
                progress(chars)
                chars = 0
        _read_line(text, number, parse, ctx, report, sink, strict)
    if progress is not None and chars:
        progress(chars)


def _read_line(  # noqa: PLR0917 (per line: positional is cheaper)
    text: str,
    number: int,
    parse: LineParser,
    ctx: LineContext,
    report: ListReport,
    sink: RuleSink,
    strict: bool,
) -> None:
    report.lines += 1
    try:
        if len(text) > MAX_LINE_LENGTH:
            raise RuleSyntaxError(
                f"line longer than {MAX_LINE_LENGTH} characters ({len(text)})",
                ctx.source,
                number,
            )
        rules = parse(text.rstrip("\r\n"), number, ctx)
    except Exception as exc:  # a bad line is reported, whatever it breaks
        error = (
            exc
            if isinstance(exc, RuleSyntaxError)
            else RuleSyntaxError(
                f"unreadable line ({type(exc).__name__}: {exc})", ctx.source, number
            )
        )
        if strict:
            raise error from None
        report.skipped += 1
        report.warnings.append(error)
        return
    if not rules:
        if rules is IGNORED:
            report.ignored += 1
        else:
            report.comments += 1
        return
    report.rule_lines += 1
    for rule in rules:
        if sink(rule):
            report.loaded += 1
        else:
            report.duplicates += 1


class TextSink(Protocol):
    """A sink that also takes runs of plain lines in bulk (:class:`~urlsieve.match.snapshot.
    SnapshotBuilder`): ``add_text`` adds the run of lines of ``text`` from ``pos`` that
    ``mode`` takes, as the line parser would have with ``ctx``, and returns ``(pos after the run,
    lines, comment lines, rules new, duplicates)``, or ``None`` for a line it leaves to
    the line parser."""

    def __call__(self, rule: Rule) -> bool: ...

    def add_text(
        self, text: str, pos: int, mode: int, ctx: LineContext, first_line: int
    ) -> tuple[int, int, int, int, int] | None: ...


#: Line parsers whose plain lines a :class:`TextSink` may take in bulk, by mode: 0 any
#: host or host/path line, 1 host lines only (a squidGuard ``domains`` file), 2 host/path
#: lines without a leading ``www.`` (a ``urls`` file). What a mode takes is a subset of
#: what the parser reads to a rule with nothing to canonicalise; the parser reads the rest.
TEXT_MODES: dict[LineParser, int] = {}


def read_text(
    text: str,
    parse: LineParser,
    report: ListReport,
    sink: RuleSink,
    *,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """:func:`read_lines` over the lines of ``text`` (split at ``\\n``; a final newline
    ends the last line). A sink with ``add_text`` (:class:`TextSink`) takes the runs of
    plain lines in one call each, with the same rules, order and report."""
    mode = TEXT_MODES.get(parse)
    add_text = getattr(sink, "add_text", None) if mode is not None else None
    if add_text is None:
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()
        read_lines(lines, parse, report, sink, strict=strict, progress=progress)
        return
    assert mode is not None
    ctx = LineContext(report.action, report.category, report.source, report.notes)
    text = text.removeprefix("\ufeff")
    pos, number, size = 0, 0, len(text)
    while pos < size:
        run = add_text(text, pos, mode, ctx, number + 1)
        if run is not None:
            end, lines, comments, new, duplicates = run
            number += lines
            report.lines += lines
            report.comments += comments
            report.rule_lines += new + duplicates
            report.loaded += new
            report.duplicates += duplicates
        else:
            end = text.find("\n", pos)
            if end < 0:
                end = size
            number += 1
            _read_line(text[pos:end], number, parse, ctx, report, sink, strict)
            end += 1
        if progress is not None:
            progress(min(end, size) - pos)
        pos = end


_URL_COLUMNS = ("url", "uri", "link", "address")


class CsvLine:
    """Line parser for CSV feeds; one instance per file (the first row may be a header).

    The URL column is the first header named ``url``/``uri``/``link``/``address``,
    or column 0 when the first row is not a header. A row with more fields
    than the header had unquoted commas in its URL: the surplus is joined
    back into the URL.
    """

    def __init__(self) -> None:
        self.url_at = 0
        self.width: int | None = None
        self.started = False

    def __call__(self, text: str, number: int, ctx: LineContext) -> list[Rule]:
        if not text.strip():
            return []
        row = next(csv.reader([text]))
        if not self.started:
            self.started = True
            names = [c.strip().lower() for c in row]
            found = [i for i, n in enumerate(names) if n in _URL_COLUMNS]
            if found:
                self.url_at, self.width = found[0], len(row)
                return []  # the header
        at = self.url_at
        if self.width is not None and len(row) > self.width:
            extra = len(row) - self.width
            row = [*row[:at], ",".join(row[at : at + extra + 1]), *row[at + extra + 1 :]]
        if at >= len(row):
            raise RuleSyntaxError(f"no URL column (column {at + 1})", ctx.source, number)
        value = row[at].strip()
        if not value:
            raise RuleSyntaxError("empty URL column", ctx.source, number)
        return [parse_rule(value, ctx.action, ctx.category, ctx.source, number)]


TEXT_MODES[plain_line] = 0

#: Line parser factories by format name (a fresh parser per file).
FORMATS: dict[str, Callable[[], LineParser]] = {
    "plain": lambda: plain_line,
    "hosts": lambda: hosts_line,
    "adblock": lambda: adblock_line,
    "csv": CsvLine,
}

_ADBLOCK_HINT = re.compile(r"(?:@@)?\|\|[^\s]")
# Possessive and unambiguous: linear on any line (a long "a:a:a…" line backtracked).
_HOSTS_HINT = re.compile(r"(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]*+:[0-9a-fA-F:]*+)\s+\S")


def sniff_format(name: str, head: list[str]) -> str:
    """Guess a file's format from its name and first lines: csv, adblock, hosts or plain."""
    if name.lower().endswith(".csv"):
        return "csv"
    for line in head:
        text = line[:4096].strip().lstrip("\ufeff")
        if not text:
            continue
        if text.startswith(("[Adblock", "!")) or _ADBLOCK_HINT.match(text):
            return "adblock"
        if text.startswith("#"):
            continue
        if _HOSTS_HINT.match(text):
            return "hosts"
    return "plain"
