"""A policy written in urlsieve's TOML configuration file.

.. code-block:: toml

    [policy]
    timezone = "Europe/Paris"        # time rules are read in this zone (default: local time)
    dbhome = "/var/lib/urlsieve/db"  # relative list paths start here (default: the file's dir)

    [[time]]
    name = "lessons"
    weekly = ["mtwhf 08:00-12:00 13:00-16:00"]     # days, then ranges (squidGuard's syntax)
    dates = ["*.12.24 12:00-23:59", "2026.07.01-2026.08.31"]

    [[dest]]                         # a destination: its own lists (its name is its category)
    name = "porn"
    domainlist = "porn/domains"
    urllist = "porn/urls"
    expressionlist = "porn/expressions"
    redirect = "http://block.lan/?c=%t&u=%u"        # wins over the ACL's block page

    [[source]]
    name = "students"
    ip = ["10.0.0.0/24", "10.1.0.1-10.1.0.9", "2001:db8::/64"]
    iplist = "students.ips"
    user = ["alice"]
    userlist = "students.users"
    domain = ["lab.school.example"]  # client host names (and the names under them)
    within = "lessons"               # or outside = "…": the source only matches then

    [[rewrite]]
    name = "safe"
    substitutions = ["s@(google\\.[a-z.]+/search\\?)@\\1safe=active\\&@i"]

    [[acl]]
    source = "students"              # "default" for the default ACL
    within = "lessons"               # or outside = "…"
    pass = ["good", "!porn", "!in-addr", "all"]
    redirect = "http://block.lan/?c=%t"
    rewrite = "safe"
    else = { pass = ["!porn", "all"] }

Categories of the ``[rules]`` lists are destinations too: ``pass = ["!adult"]``
blocks UT1's ``adult`` without a ``[[dest]]``. Every error names the table it is in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from urlsieve.policy.clients import AddressSet
from urlsieve.policy.lists import ListRead, read_ip_statement, read_iplist, read_userlist
from urlsieve.policy.model import (
    LOG_OWNERS,
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
from urlsieve.policy.rewrite import parse_substitution, safe_search
from urlsieve.policy.timerules import (
    DateEntry,
    TimeRule,
    TimeSyntaxError,
    WeeklyEntry,
)
from urlsieve.store.spec import resolve_spec

__all__ = ["POLICY_SECTIONS", "has_policy", "read_native"]

#: The TOML sections a policy is written in.
POLICY_SECTIONS = ("policy", "time", "dest", "source", "rewrite", "acl", "log")


def has_policy(data: Mapping[str, Any]) -> bool:
    return any(key in data for key in ("acl", "source"))


def _strings(value: Any, where: str, key: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{key} must be a string or a list of strings, not {value!r}", where)
    return list(value)


def _tables(data: Mapping[str, Any], key: str, path: str) -> list[tuple[str, dict[str, Any]]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise PolicyError(f"[[{key}]] must be an array of tables", path)
    out = []
    for i, table in enumerate(value, 1):
        label = table.get("name", table.get("source", "?"))
        out.append((f"{path}: [[{key}]] #{i} ({label!r})", table))
    return out


def _known(table: Mapping[str, Any], keys: set[str], where: str) -> None:
    unknown = set(table) - keys
    if unknown:
        raise PolicyError(
            f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(keys))})",
            where,
        )


def _name(table: Mapping[str, Any], where: str, key: str = "name") -> str:
    name = table.get(key)
    if not isinstance(name, str) or not name:
        raise PolicyError(f"'{key}' must be a non-empty string", where)
    return name


def read_native(data: Mapping[str, Any], path: str) -> Policy:
    """The policy of a parsed TOML file (``path`` for messages and relative paths)."""
    head = data.get("policy", {})
    if not isinstance(head, dict):
        raise PolicyError("[policy] must be a table", path)
    _known(
        head,
        {"timezone", "dbhome", "warn_store", "warn_minutes", "warn_page"},
        f"{path}: [policy]",
    )
    base = Path(path).resolve().parent
    dbhome = Path(head["dbhome"]) if "dbhome" in head else base
    if not dbhome.is_absolute():
        dbhome = base / dbhome

    def file(value: Any, where: str, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise PolicyError(f"{key} must be a path", where)
        full = value if os.path.isabs(value) else str(dbhome / value)
        if not os.path.isfile(full):
            raise PolicyError(f"{key} {value}: no such file ({full})", where)
        return full

    policy = Policy(origin=path, timezone=head.get("timezone"))
    for key in ("warn_store", "warn_page"):
        if key in head:
            if not isinstance(head[key], str) or not head[key]:
                raise PolicyError(f"{key} must be a string", f"{path}: [policy]")
            # A relative file in the store spec is the configuration file's, like every
            # other relative path in it (not the current directory's).
            value = resolve_spec(head[key], base) if key == "warn_store" else head[key]
            setattr(policy, key, value)
    if "warn_minutes" in head:
        minutes = head["warn_minutes"]
        if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= 1440:
            raise PolicyError("warn_minutes must be 1 to 1440", f"{path}: [policy]")
        policy.warn_seconds = minutes * 60
    if policy.timezone is not None:
        try:
            from zoneinfo import ZoneInfo

            ZoneInfo(policy.timezone)
        except Exception:
            raise PolicyError(
                f"unknown time zone {policy.timezone!r}", f"{path}: [policy]"
            ) from None
    for where, table in _tables(data, "time", path):
        _known(table, {"name", "weekly", "dates"}, where)
        name = _name(table, where)
        entries: list[WeeklyEntry | DateEntry] = []
        try:
            for line in _strings(table.get("weekly", []), where, "weekly"):
                entries.append(WeeklyEntry.parse(line.split()))
            for line in _strings(table.get("dates", []), where, "dates"):
                words = line.split()
                if not words:
                    raise TimeSyntaxError("an empty date")
                entries.append(DateEntry.parse(words[0], words[1:]))
        except TimeSyntaxError as exc:
            raise PolicyError(str(exc), where) from None
        if not entries:
            raise PolicyError("a time rule needs weekly or dates entries", where)
        if name in policy.times:
            raise PolicyError(f"time {name!r} is defined twice", where)
        policy.times[name] = TimeRule(name, tuple(entries))
    for where, table in _tables(data, "dest", path):
        _known(table, {"name", "domainlist", "urllist", "expressionlist", "redirect"}, where)
        name = _name(table, where)
        if name in policy.dests:
            raise PolicyError(f"dest {name!r} is defined twice", where)
        lists = {
            key: file(table[key], where, key)
            for key in ("domainlist", "urllist", "expressionlist")
            if key in table
        }
        redirect = table.get("redirect")
        if redirect is not None and not isinstance(redirect, str):
            raise PolicyError("redirect must be a string", where)
        policy.dests[name] = Dest(name, redirect=redirect, where=where, **lists)
    for where, table in _tables(data, "source", path):
        _known(
            table,
            {"name", "ip", "iplist", "user", "userlist", "domain", "within", "outside"},
            where,
        )
        name = _name(table, where)
        has_ip = "ip" in table or "iplist" in table
        # The ip entries' notes are left out: IPv6 is no surprise in urlsieve's own format.
        inline = [read_ip_statement(where, t) for t in _strings(table.get("ip", []), where, "ip")]
        policy.skipped += [line for read in inline for line in read.skipped]
        reads: list[ListRead] = [
            read_iplist(file(listed, where, "iplist"))
            for listed in _strings(table.get("iplist", []), where, "iplist")
        ]
        users: set[str] | None = None
        if "user" in table or "userlist" in table:
            users = {u.lower() for u in _strings(table.get("user", []), where, "user")}
            for listed in _strings(table.get("userlist", []), where, "userlist"):
                reads.append(read_userlist(file(listed, where, "userlist")))
                users |= reads[-1].users
        for read in reads:
            policy.skipped += read.skipped
            policy.notes += read.notes
        domains = None
        if "domain" in table:
            domains = tuple(
                d.lower().strip(".") for d in _strings(table["domain"], where, "domain")
            )
        time, within = _time_limit(table, where)
        if any(s.name == name for s in policy.sources):
            raise PolicyError(f"source {name!r} is defined twice", where)
        policy.sources.append(
            Source(
                name,
                AddressSet.of(
                    [a for read in (*inline, *reads) for a in read.addresses],
                    [m for read in (*inline, *reads) for m in read.masked],
                )
                if has_ip
                else None,
                frozenset(users) if users is not None else None,
                domains,
                time,
                within,
                where,
            )
        )
    for where, table in _tables(data, "rewrite", path):
        _known(table, {"name", "substitutions", "safe_search"}, where)
        name = _name(table, where)
        safe = table.get("safe_search", False)
        if not isinstance(safe, bool):
            raise PolicyError("safe_search must be true or false", where)
        try:
            subs = (safe_search() if safe else ()) + tuple(
                parse_substitution(s)
                for s in _strings(table.get("substitutions", []), where, "substitutions")
            )
        except ValueError as exc:
            raise PolicyError(str(exc), where) from None
        policy.rewrites[name] = Rewrite(name, subs, where)
    for where, table in _tables(data, "acl", path):
        _known(table, {"source", "within", "outside", "pass", "redirect", "rewrite", "else"}, where)
        name = _name(table, where, "source")
        time, within = _time_limit(table, where)
        otherwise = None
        if "else" in table:
            if time is None:
                raise PolicyError("'else' needs 'within' or 'outside' (a time rule)", where)
            other = table["else"]
            if not isinstance(other, dict):
                raise PolicyError("'else' must be a table", where)
            _known(other, {"pass", "redirect", "rewrite"}, f"{where}.else")
            otherwise = _branch(other, f"{where}.else")
        if name in policy.acls:
            raise PolicyError(f"ACL {name!r} is defined twice", where)
        policy.acls[name] = Acl(name, _branch(table, where), time, within, otherwise, where)
    for where, table in _tables(data, "log", path):
        _known(table, {"owner", "name", "file", "anonymous", "verbose"}, where)
        owner, name = table.get("owner"), _name(table, where)
        if owner not in LOG_OWNERS:
            raise PolicyError(f"owner must be one of {', '.join(LOG_OWNERS)}", where)
        target = table.get("file")
        if not isinstance(target, str) or not target:
            raise PolicyError("file must be a path", where)
        flags = [table.get(k, False) for k in ("anonymous", "verbose")]
        if not all(isinstance(f, bool) for f in flags):
            raise PolicyError("anonymous and verbose must be true or false", where)
        full = target if os.path.isabs(target) else str(base / target)
        policy.logs[(owner, name)] = LogSpec(full, *flags)
    return policy


def _branch(table: Mapping[str, Any], where: str) -> Branch:
    if "pass" not in table:
        raise PolicyError("an ACL needs a pass list (e.g. pass = ['!adult', 'all'])", where)
    try:
        passes = tuple(PassEntry.parse(t) for t in _strings(table["pass"], where, "pass"))
    except ValueError as exc:
        raise PolicyError(str(exc), where) from None
    redirect = table.get("redirect")
    rewrite = table.get("rewrite")
    for key, value in (("redirect", redirect), ("rewrite", rewrite)):
        if value is not None and not isinstance(value, str):
            raise PolicyError(f"{key} must be a string", where)
    return Branch(passes, redirect, rewrite)


def _time_limit(table: Mapping[str, Any], where: str) -> tuple[str | None, bool]:
    if "within" in table and "outside" in table:
        raise PolicyError("'within' and 'outside' both set: keep one", where)
    for key in ("within", "outside"):
        if key in table:
            value = table[key]
            if not isinstance(value, str) or not value:
                raise PolicyError(f"{key} must name a time rule", where)
            return value, key == "within"
    return None, True


def _q(value: str) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _qs(values: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def _address_texts(addresses: AddressSet) -> list[str]:
    import ipaddress

    out = []
    for family, (starts, ends) in ((4, addresses.v4), (6, addresses.v6)):
        make = ipaddress.IPv4Address if family == 4 else ipaddress.IPv6Address
        for low, high in zip(starts, ends, strict=True):
            out.append(str(make(low)) if low == high else f"{make(low)}-{make(high)}")
    for net, mask in addresses.masked:
        out.append(f"{ipaddress.IPv4Address(net)}/{ipaddress.IPv4Address(mask)}")
    return out


def to_toml(policy: Policy) -> str:
    """The policy written as the TOML sections :func:`read_native` reads (list paths
    absolute, addresses as merged ranges)."""
    out: list[str] = []
    head = [f"timezone = {_q(policy.timezone)}"] if policy.timezone else []
    if policy.warn_store:
        head += [
            f"warn_store = {_q(policy.warn_store)}",
            f"warn_minutes = {policy.warn_seconds // 60}",
        ]
    if policy.warn_page:
        head.append(f"warn_page = {_q(policy.warn_page)}")
    if head:
        out += ["[policy]", *head, ""]
    for rule in policy.times.values():
        weekly = [
            str(e).removeprefix("weekly ") for e in rule.entries if isinstance(e, WeeklyEntry)
        ]
        dates = [str(e).removeprefix("date ") for e in rule.entries if isinstance(e, DateEntry)]
        out += ["[[time]]", f"name = {_q(rule.name)}"]
        if weekly:
            out.append(f"weekly = {_qs(weekly)}")
        if dates:
            out.append(f"dates = {_qs(dates)}")
        out.append("")
    for dest in policy.dests.values():
        out += ["[[dest]]", f"name = {_q(dest.name)}"]
        for key in ("domainlist", "urllist", "expressionlist", "redirect"):
            value = getattr(dest, key)
            if value:
                out.append(f"{key} = {_q(os.path.abspath(value) if key != 'redirect' else value)}")
        out.append("")
    for source in policy.sources:
        out += ["[[source]]", f"name = {_q(source.name)}"]
        if source.addresses is not None:
            out.append(f"ip = {_qs(_address_texts(source.addresses))}")
        if source.users is not None:
            out.append(f"user = {_qs(sorted(source.users))}")
        if source.domains is not None:
            out.append(f"domain = {_qs(source.domains)}")
        if source.time is not None:
            out.append(f"{'within' if source.within else 'outside'} = {_q(source.time)}")
        out.append("")
    for rewrite in policy.rewrites.values():
        subs = [
            f"s@{s.pattern}@{s.replacement}@"
            + ("i" if s.ignore_case else "")
            + ("g" if s.every else "")
            + ({301: "R", 302: "r"}.get(s.redirect or 0, ""))
            for s in rewrite.substitutions
        ]
        out += ["[[rewrite]]", f"name = {_q(rewrite.name)}", f"substitutions = {_qs(subs)}", ""]
    for acl in policy.acls.values():
        out += ["[[acl]]", f"source = {_q(acl.source)}"]
        if acl.time is not None:
            out.append(f"{'within' if acl.within else 'outside'} = {_q(acl.time)}")
        out += _branch_lines(acl.branch)
        if acl.otherwise is not None:
            inner = ", ".join(
                line.replace(" = ", " = ", 1) for line in _branch_lines(acl.otherwise)
            )
            out.append(f"else = {{ {inner} }}")
        out.append("")
    for (owner, name), spec in policy.logs.items():
        out += [
            "[[log]]",
            f"owner = {_q(owner)}",
            f"name = {_q(name)}",
            f"file = {_q(spec.path)}",
            f"anonymous = {'true' if spec.anonymous else 'false'}",
            f"verbose = {'true' if spec.verbose else 'false'}",
            "",
        ]
    return "\n".join(out)


def _branch_lines(branch: Branch) -> list[str]:
    lines = [f"pass = {_qs([str(e) for e in branch.passes])}"]
    if branch.redirect is not None:
        lines.append(f"redirect = {_q(branch.redirect)}")
    if branch.rewrite is not None:
        lines.append(f"rewrite = {_q(branch.rewrite)}")
    return lines
