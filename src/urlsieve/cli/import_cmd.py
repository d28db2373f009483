"""``urlsieve import squidguard CONF``: a squidGuard configuration as urlsieve's."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from urlsieve import __version__
from urlsieve.exceptions import ConfigError
from urlsieve.policy.build import build_rules
from urlsieve.policy.native import to_toml
from urlsieve.policy.squidguard import read_squidguard

#: Every place urlsieve decides differently from squidGuard on purpose.
DEVIATIONS = (
    "urllist entries match at path-segment boundaries ('/ads' blocks /ads and /ads/…, not "
    "/adsense); squidGuard matches raw string prefixes",
    "urllist entries also match the host's subdomains, and an entry written www.host/path is "
    "host/path (squidGuard: that host only, www.host only)",
    "URLs are canonicalised before matching (percent-escapes, case, dots, IP spellings): "
    "spellings squidGuard misses are caught",
    "a request squidGuard cannot parse passes in its emergency mode; urlsieve answers by its "
    "failure mode (closed by default)",
    'block pages: %u is inserted as Squid sent it (squidGuard percent-decodes it), and " and '
    "\\ are escaped in the quoted reply value",
    "a user sent escaped (DOMAIN%5cuser) is read unescaped (domain\\user, as lists write it)",
    "list lines squidGuard cannot survive (blanks only: it crashes; a bad address, prefix or "
    "range: it passes everything) are skipped, each listed as 'skipped: file:line'; IPv6 in an "
    "iplist or ip statement is read (squidGuard has none there), each listed as a note",
    "the rest of a domainlist/urllist line (squidGuard: that entry's own redirect page) is not "
    "applied, and a domainlist entry squidGuard never matches (.host, *.host, http://host/, "
    "host/) is read as the host it names: each listed as a note",
    "a comma right after a network in an ip statement, and a substitution of word "
    "characters only (s@old@new@), are syntax errors for squidGuard 1.6 (it passes "
    "everything); urlsieve reads them as meant: each listed as a note",
    "squidGuard's lookup bugs are not copied (neighbour-only list comparisons, client domains "
    "without a dot boundary, whole-day dates missing 23:59, blocks without a page passing)",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "import",
        help="convert another filter's configuration (squidGuard)",
        description="Convert another filter's configuration into urlsieve's.",
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    sg = kinds.add_parser(
        "squidguard",
        help="read a squidGuard.conf; write urlsieve.toml and a compiled snapshot",
        description=(
            "Read a squidGuard.conf as it is (dbhome, dest, src, time, rew, acl) and write the "
            "equivalent urlsieve configuration (OUTPUT/urlsieve.toml) and compiled snapshot "
            "(OUTPUT/rules.snap). Every construct that is not mapped and every place urlsieve "
            "decides differently is listed. A list line or entry that cannot be read is skipped "
            "and listed (skipped: FILE:LINE: reason); exit status 2 on a statement of the "
            "configuration that cannot be read."
        ),
    )
    sg.add_argument("conf", metavar="SQUIDGUARD_CONF")
    sg.add_argument(
        "-o", "--output", metavar="DIR", default=".", help="where to write (default: .)"
    )
    sg.add_argument("--force", action="store_true", help="replace an existing urlsieve.toml")
    sg.add_argument(
        "--timezone", metavar="ZONE", help="time zone of the time rules (default: local)"
    )
    sg.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    conf = read_squidguard(args.conf)
    if args.timezone:
        conf.policy.timezone = args.timezone
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    toml_path = out / "urlsieve.toml"
    snapshot = out / "rules.snap"
    if toml_path.exists() and not args.force:
        raise ConfigError(f"{toml_path} exists: pass --force to replace it")
    rules = build_rules(
        conf.policy,
        meta={
            "imported_from": os.path.abspath(args.conf),
            "compiled_by": f"urlsieve {__version__}",
        },
    )
    info = rules.filter.save(snapshot)
    head = [
        f"# Imported from {os.path.abspath(args.conf)} by `urlsieve import squidguard`.",
        "# Recompile the snapshot after a list change: urlsieve import squidguard … --force",
        "",
        "[rules]",
        'snapshot = "rules.snap"',
        "",
        "[squid]",
        'mode = "rewrite"            # squidGuard\'s replies: OK rewrite-url="…"',
        "",
    ]
    tmp = toml_path.with_suffix(".toml.tmp")
    tmp.write_text("\n".join(head) + to_toml(conf.policy))
    os.replace(tmp, toml_path)
    policy = conf.policy
    print(
        f"read {args.conf}: {len(policy.dests)} destinations, {len(policy.sources)} sources, "
        f"{len(policy.times)} time rules, {len(policy.acls)} ACLs, {len(policy.rewrites)} rewrites"
    )
    print(f"wrote {toml_path} and {snapshot} ({info.rules} rules, {info.size} bytes)")
    for warning in rules.warnings:
        print(f"skipped: {warning}")
    for note in conf.notes:
        print(f"note: {note}")
    for line in policy.report():
        print(line)
    for note in rules.notes:
        print(f"note: {note}")
    for deviation in DEVIATIONS:
        print(f"differs on purpose: {deviation}")
    print(f"run it: urlsieve squid-helper --config {toml_path}")
    return 0
