"""Reading a squidGuard configuration as it is (``squidGuard.conf``).

:func:`read_squidguard` turns the file into a :class:`~urlsieve.policy.model.Policy`
and the destinations' list files, with everything it could not map and every place
where urlsieve decides differently on purpose (:attr:`SquidGuardConf.notes`). The
syntax is squidGuard 1.6's: ``dbhome``, ``logdir``, ``dest``/``destination``,
``src``/``source`` (optionally ``within``/``outside`` a time rule), ``time``,
``rew``/``rewrite`` and one ``acl`` block with a ``default`` ACL; ``#`` starts a
comment; a statement ends at the end of its line or at a brace.

A line that cannot be read is reported as ``file:line: reason`` (:class:`PolicyError`);
an ACL naming an unknown destination or time rule fails here too, never at request
time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from urlsieve.policy.clients import AddressSet
from urlsieve.policy.lists import ListRead, read_ip_statement, read_iplist, read_userlist
from urlsieve.policy.model import (
    Acl,
    Branch,
    Dest,
    LogSpec,
    PassEntry,
    Policy,
    PolicyError,
    Rewrite,
    Source,
)
from urlsieve.policy.rewrite import parse_substitution
from urlsieve.policy.timerules import (
    DateEntry,
    TimeRule,
    TimeSyntaxError,
    WeeklyEntry,
)

__all__ = ["MAX_CONF_BYTES", "SquidGuardConf", "read_squidguard"]

#: The largest squidGuard.conf read.
MAX_CONF_BYTES = 16 << 20
_TOKEN = re.compile(r'"[^"\n]*"|[{}]|[^\s{}#]+|#[^\n]*|\n')
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: What squidGuard 1.6's lexer reads as one word (a substitution of these alone is one).
_SG_WORD = re.compile(r"[A-Za-z/][A-Za-z0-9/_\-.:%+?=&@,]*")


@dataclass
class SquidGuardConf:
    """A squidGuard configuration read into urlsieve's model."""

    path: str
    policy: Policy
    dbhome: str | None = None
    logdir: str | None = None
    #: Constructs not mapped and deliberate differences, as ``file:line: text``.
    notes: list[str] = field(default_factory=list)


@dataclass
class _Stmt:
    words: list[str]
    line: int
    block: list[_Stmt] | None = None


def _tokens(text: str) -> Iterator[tuple[str, int]]:
    line = 1
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok == "\n":
            line += 1
            yield "\n", line - 1
        elif tok.startswith("#"):
            continue
        else:
            yield (tok[1:-1] if tok.startswith('"') else tok), line


def _statements(path: str, text: str) -> list[_Stmt]:
    """Statements and blocks: words up to a newline or a brace; ``{`` opens a block."""
    stack: list[list[_Stmt]] = [[]]
    opened: list[int] = []
    words: list[str] = []
    start = 0
    for tok, line in _tokens(text):
        if tok in ("\n", "{", "}"):
            if words:
                stack[-1].append(_Stmt(words, start))
                words = []
            if tok == "{":
                if not stack[-1]:
                    raise PolicyError("a block '{' with no statement before it", f"{path}:{line}")
                if stack[-1][-1].block is not None:
                    raise PolicyError(
                        f"a second block for {stack[-1][-1].words[0]!r}", f"{path}:{line}"
                    )
                block: list[_Stmt] = []
                stack[-1][-1].block = block
                stack.append(block)
                opened.append(line)
            elif tok == "}":
                if len(stack) == 1:
                    raise PolicyError("'}' without a block to close", f"{path}:{line}")
                stack.pop()
                opened.pop()
            continue
        if not words:
            start = line
        words.append(tok)
    if words:
        stack[-1].append(_Stmt(words, start))
    if opened:
        raise PolicyError("block not closed (missing '}')", f"{path}:{opened[-1]}")
    return stack[0]


def read_squidguard(path: str | os.PathLike[str]) -> SquidGuardConf:
    """Read a squidGuard.conf; :class:`PolicyError` (``file:line: reason``) for what cannot
    be read or would fail at request time."""
    name = str(path)
    try:
        with open(name, "rb") as fh:
            data = fh.read(MAX_CONF_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"cannot read ({exc.strerror or exc})", name) from exc
    if len(data) > MAX_CONF_BYTES:
        raise PolicyError(f"larger than {MAX_CONF_BYTES >> 20} MiB: not a squidGuard.conf", name)
    text = data.decode("utf-8", "surrogateescape")
    reader = _Reader(name)
    reader.read(_statements(name, text))
    return reader.finish()


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.conf = SquidGuardConf(path, Policy(origin=path))
        self.conf.policy.timezone = None
        self.dbhome: str | None = None
        self.acl_seen = False

    def where(self, stmt: _Stmt) -> str:
        return f"{self.path}:{stmt.line}"

    def note(self, stmt: _Stmt, text: str) -> None:
        self.conf.notes.append(f"{self.where(stmt)}: {text}")

    def fail(self, stmt: _Stmt, reason: str) -> PolicyError:
        return PolicyError(reason, self.where(stmt))

    def file(self, stmt: _Stmt, value: str) -> str:
        """A list file as squidGuard finds it: relative to dbhome."""
        if os.path.isabs(value) or self.dbhome is None:
            return value
        return os.path.join(self.dbhome, value)

    def read(self, statements: list[_Stmt]) -> None:
        for stmt in statements:
            key = stmt.words[0].lower()
            args = stmt.words[1:]
            if key == "dbhome":
                self.dbhome = self.conf.dbhome = self.one(stmt, args)
            elif key == "logdir":
                self.conf.logdir = self.one(stmt, args)
            elif key in ("dest", "destination"):
                self.dest(stmt, args)
            elif key in ("src", "source"):
                self.source(stmt, args)
            elif key == "time":
                self.time(stmt, args)
            elif key in ("rew", "rewrite"):
                self.rewrite(stmt, args)
            elif key == "acl":
                self.acl(stmt)
            elif key in (
                "ldapcachetime",
                "ldapprotover",
                "ldapbinddn",
                "ldapbindpass",
                "mysqlusername",
                "mysqlpassword",
                "mysqldb",
            ):
                self.note(stmt, f"'{key}' is not supported (no LDAP or MySQL sources): ignored")
            else:
                raise self.fail(stmt, f"unknown statement {stmt.words[0]!r}")

    def one(self, stmt: _Stmt, args: list[str]) -> str:
        if len(args) != 1:
            raise self.fail(stmt, f"'{stmt.words[0]}' takes one value, got {len(args)}")
        return args[0]

    def named(self, stmt: _Stmt, args: list[str], kind: str) -> str:
        if not args or not _NAME.fullmatch(args[0]):
            raise self.fail(stmt, f"{kind} needs a name (letters, digits, '_', '.', '-')")
        if stmt.block is None:
            raise self.fail(stmt, f"{kind} {args[0]!r} needs a {{ … }} block")
        return args[0]

    def time_limit(self, stmt: _Stmt, args: list[str]) -> tuple[str | None, bool]:
        if not args:
            return None, True
        if len(args) != 2 or args[0].lower() not in ("within", "outside"):
            raise self.fail(stmt, "expected 'within TIME' or 'outside TIME' after the name")
        return args[1], args[0].lower() == "within"

    # -- blocks ------------------------------------------------------------------------

    def dest(self, stmt: _Stmt, args: list[str]) -> None:
        name = self.named(stmt, args, "dest")
        if name in self.conf.policy.dests:
            raise self.fail(stmt, f"dest {name!r} is defined twice")
        if len(args) > 1:
            self.note(
                stmt, f"dest {name!r}: a time limit on a destination is not supported: ignored"
            )
        values: dict[str, str] = {}
        for inner in stmt.block or []:
            key = inner.words[0].lower()
            rest = inner.words[1:]
            if key in ("domainlist", "urllist", "expressionlist"):
                value = self.one(inner, rest)
                path = self.file(inner, value)
                if not os.path.isfile(path):
                    raise self.fail(inner, f"{key} {value}: no such file ({path})")
                values[key] = path
            elif key == "redirect":
                values["redirect"] = self.one(inner, rest)
            elif key in ("log", "logfile"):
                self.log(inner, "dest", name)
            elif key in ("rewrite", "rew"):
                self.note(
                    inner, f"dest {name!r}: a rewrite on a destination is not supported: ignored"
                )
            else:
                raise self.fail(inner, f"unknown statement {inner.words[0]!r} in dest {name!r}")
        if "urllist" in values:
            self.note(
                stmt,
                f"dest {name!r}: urllist entries match at path-segment boundaries "
                "(squidGuard matches raw string prefixes: '/ads' also blocks '/adsense')",
            )
        redirect = values.get("redirect")
        self.conf.policy.dests[name] = Dest(
            name,
            values.get("domainlist"),
            values.get("urllist"),
            values.get("expressionlist"),
            redirect or None,  # the policy's renderer fills it as squidGuard does
            self.where(stmt),
        )

    def source(self, stmt: _Stmt, args: list[str]) -> None:
        name = self.named(stmt, args, "src")
        time, within = self.time_limit(stmt, args[1:])
        lists = ListRead(self.path)
        users: set[str] | None = None
        domains: list[str] | None = None
        has_ip = False
        for inner in stmt.block or []:
            key = inner.words[0].lower()
            rest = inner.words[1:]
            read: ListRead | None = None
            if key == "ip":
                has_ip = True
                read = read_ip_statement(self.where(inner), " ".join(rest))
            elif key == "iplist":
                has_ip = True
                read = read_iplist(self.file(inner, self.one(inner, rest)))
            elif key == "user":  # squidGuard 1.6: blanks separate; a comma is part of a name
                users = (users or set()) | {u.lower() for u in rest}
                for word in rest:
                    if "," in word:
                        self.note(
                            inner,
                            f"user {word!r} is one name with its comma, as squidGuard 1.6 "
                            "reads it (separate users with blanks): no client name matches it",
                        )
            elif key == "userlist":
                read = read_userlist(self.file(inner, self.one(inner, rest)))
                users = (users or set()) | read.users
            elif key == "domain":
                domains = (domains or []) + [d.lower().strip(".") for d in rest]
            elif key in ("log", "logfile"):
                self.log(inner, "src", name)
            elif key in ("within", "outside"):
                time, within = self.time_limit(inner, inner.words)
            else:
                raise self.fail(
                    inner, f"unknown or unsupported statement {inner.words[0]!r} in src {name!r}"
                )
            if read is not None:
                lists.addresses += read.addresses
                lists.masked += read.masked
                self.conf.policy.skipped += read.skipped
                self.conf.policy.notes += read.notes
        policy = self.conf.policy
        if any(s.name == name for s in policy.sources):
            raise self.fail(stmt, f"src {name!r} is defined twice")
        policy.sources.append(
            Source(
                name,
                AddressSet.of(lists.addresses, lists.masked) if has_ip else None,
                frozenset(users) if users is not None else None,
                tuple(domains) if domains is not None else None,
                time,
                within,
                self.where(stmt),
            )
        )

    def time(self, stmt: _Stmt, args: list[str]) -> None:
        name = self.named(stmt, args, "time")
        entries: list[WeeklyEntry | DateEntry] = []
        for inner in stmt.block or []:
            key = inner.words[0].lower()
            rest = inner.words[1:]
            try:
                if key == "weekly":
                    entries.append(WeeklyEntry.parse(rest))
                elif key == "date":
                    if not rest:
                        raise TimeSyntaxError("'date' needs a date (yyyy.mm.dd)")
                    entries.append(DateEntry.parse(rest[0], rest[1:]))
                else:
                    raise TimeSyntaxError(f"unknown statement {inner.words[0]!r} in time {name!r}")
            except TimeSyntaxError as exc:
                raise self.fail(inner, str(exc)) from None
        if name in self.conf.policy.times:
            raise self.fail(stmt, f"time {name!r} is defined twice")
        self.conf.policy.times[name] = TimeRule(name, tuple(entries))

    def rewrite(self, stmt: _Stmt, args: list[str]) -> None:
        name = self.named(stmt, args, "rew")
        subs = []
        for inner in stmt.block or []:
            key = inner.words[0]
            if key.lower() in ("log", "logfile"):
                self.log(inner, "rew", name)
                continue
            text = " ".join(inner.words)
            if _SG_WORD.fullmatch(text):
                self.note(
                    inner,
                    f"{text!r}: squidGuard 1.6 reads this substitution as a word (a syntax "
                    "error: it passes every request); urlsieve applies it (deviation: write "
                    "a group, s@(old)@new@, for both)",
                )
            try:
                subs.append(parse_substitution(text))
            except ValueError as exc:
                raise self.fail(inner, str(exc)) from None
        self.conf.policy.rewrites[name] = Rewrite(name, tuple(subs), self.where(stmt))

    def acl(self, stmt: _Stmt) -> None:
        if stmt.block is None:
            raise self.fail(stmt, "acl needs a { … } block")
        if self.acl_seen:
            raise self.fail(stmt, "a second acl block (squidGuard reads one)")
        self.acl_seen = True
        pending: Acl | None = None
        for inner in stmt.block:
            words = inner.words
            if words[0].lower() == "else":
                if pending is None or inner.block is None:
                    raise self.fail(inner, "'else' must follow an ACL with a time rule")
                if pending.otherwise is not None:
                    raise self.fail(inner, f"ACL {pending.source!r} has two 'else' blocks")
                if pending.time is None:
                    raise self.fail(
                        inner, f"'else' after ACL {pending.source!r}, which has no time rule"
                    )
                pending = Acl(
                    pending.source,
                    pending.branch,
                    pending.time,
                    pending.within,
                    self.branch(inner, pending.source),
                    pending.where,
                )
                self.conf.policy.acls[pending.source] = pending
                continue
            if inner.block is None:
                raise self.fail(inner, f"ACL {words[0]!r} needs a {{ … }} block")
            name = words[0]
            time, within = self.time_limit(inner, words[1:])
            if name in self.conf.policy.acls:
                raise self.fail(inner, f"ACL {name!r} is defined twice")
            pending = Acl(name, self.branch(inner, name), time, within, None, self.where(inner))
            self.conf.policy.acls[name] = pending

    def log(self, stmt: _Stmt, owner: str, name: str) -> None:
        """``log [anonymous] [verbose] FILE``: FILE relative to logdir, as squidGuard opens it."""
        words = stmt.words[1:]
        flags = {w.lower() for w in words[:-1]}
        if not words or not flags <= {"anonymous", "verbose"}:
            raise self.fail(stmt, "expected 'log [anonymous] [verbose] FILE'")
        path = words[-1]
        if not os.path.isabs(path):
            path = os.path.join(self.conf.logdir or "/var/log/squidguard", path)
        key = (owner, name)
        if key in self.conf.policy.logs:
            self.note(stmt, f"a second log for {owner} {name!r}: ignored (as squidGuard does)")
            return
        if owner == "acl" and name != "default":
            self.note(
                stmt,
                f"a log in ACL {name!r}: squidGuard writes only the default ACL's log, so "
                "this one stays empty there; urlsieve does the same",
            )
        self.conf.policy.logs[key] = LogSpec(path, "anonymous" in flags, "verbose" in flags)

    def branch(self, stmt: _Stmt, acl: str = "default") -> Branch:
        passes: list[PassEntry] = []
        redirect = rewrite = None
        for inner in stmt.block or []:
            key = inner.words[0].lower()
            rest = inner.words[1:]
            if key == "pass":
                passes += [PassEntry.parse(t) for t in rest]
            elif key == "redirect":
                redirect = self.one(inner, rest)
            elif key in ("rewrite", "rew"):
                rewrite = self.one(inner, rest)
            elif key in ("log", "logfile"):
                self.log(inner, "acl", acl)
            else:
                raise self.fail(inner, f"unknown statement {inner.words[0]!r} in an ACL")
        return Branch(tuple(passes), redirect, rewrite)

    def finish(self) -> SquidGuardConf:
        policy = self.conf.policy
        policy.validate()
        return self.conf
