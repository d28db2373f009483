"""``urlsieve config check FILE``: validate a gateway configuration and say what it will do."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from urlsieve.cli._policy import add_who_arguments, policy_engine, wants_policy, who_and_when
from urlsieve.config import (
    ENV_VARS,
    GatewayConfig,
    describe,
    filter_loader,
    load_config,
    load_selected,
    snapshot_selection,
)
from urlsieve.exceptions import ConfigError, UrlsieveError
from urlsieve.match.snapshot import SnapshotError, read_snapshot_info
from urlsieve.policy.engine import describe_request


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "config",
        help="check a gateway configuration file",
        description="Configuration of the Squid helper and the lookup service.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "check",
        help="validate FILE and print what the gateway will do",
        description=(
            "Validate a TOML configuration (with the URLSIEVE_* environment overrides "
            "applied) and print what it will do. Exit status 0 when valid, 2 when not."
        ),
    )
    check.add_argument("file", metavar="FILE")
    check.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="URL",
        help="also print the decision for URL as the gateway makes it (base rules, learned "
        "overlay, the unknown setting); repeatable",
    )
    add_who_arguments(check)
    check.set_defaults(run=run)


def _selection(config: GatewayConfig, problems: list[str]) -> list[str]:
    """Read the lists as the gateway would and say what each selected category gives."""
    try:
        source, lines = load_selected(config.lists, config.allow, config.categories)
    except UrlsieveError as exc:
        problems.append(str(exc))
        return []
    lines.append(f"lists: {len(source)} rules in force, {len(source.warnings)} bad lines skipped")
    lines += [f"note: {skipped}" for skipped in source.skipped]
    if not len(source):
        problems.append("the lists give no rule")
    return lines


def run(args: argparse.Namespace) -> int:
    config = load_config(
        args.file, env=os.environ, overrides={"squidguard_conf": args.squidguard_conf}
    )
    if config.helper_configured:
        config.validate(helper=True)
    lines = describe(config)
    problems: list[str] = []
    if config.policy is not None or config.squidguard_conf:
        engine = policy_engine(config)  # every policy error is raised here, with file:line
        policy = engine.policy
        lines.append(
            f"policy: {len(policy.sources)} sources, {len(policy.times)} time rules, "
            f"{len(policy.acls)} ACLs, {len(policy.dests)} destinations, "
            f"{len(policy.rewrites)} rewrites, time zone {policy.timezone or 'local'}"
        )
        lines += policy.report()
        if policy.skipped:
            lines.append(
                f"policy: {len(policy.skipped)} list lines or entries skipped (listed above); "
                "the helper and the service load the rest and say so at start"
            )
        if wants_policy(args):
            who, at = who_and_when(args, engine)
            lines += describe_request(engine, who, at)
    for path in (*config.lists, *config.allow):
        if not os.path.exists(path):
            problems.append(f"list {path} does not exist")
    if (config.lists or config.allow) and not problems:
        lines += _selection(config, problems)
    if config.snapshot:
        if os.path.exists(config.snapshot):
            try:
                info = read_snapshot_info(config.snapshot, verify=True)
            except SnapshotError as exc:
                problems.append(str(exc))
            else:
                age = time.time() - info.created
                compiled = info.meta.get("selected_categories") or []
                lines.append(
                    f"snapshot: {info.rules} rules, {info.size} bytes, format "
                    f"{info.format_version}, version {info.version}, compiled {age:.0f} s ago, "
                    f"categories {', '.join(compiled) or '(all)'}"
                )
                why = snapshot_selection(info, config.categories)
                if why is not None:
                    problems.append(f"{why} (`urlsieve compile --config {args.file}`)")
                elif config.categories and not compiled:
                    lines.append(
                        f"snapshot: serves the selected categories "
                        f"{', '.join(config.categories)} (compiled from every category)"
                    )
                stale = [
                    p
                    for p in config.lists
                    if os.path.exists(p) and os.path.getmtime(p) > info.created
                ]
                if stale:
                    lines.append(
                        f"note: changed since the snapshot was compiled: {', '.join(stale)}"
                    )
        elif config.lists:
            lines.append(
                f"note: snapshot {config.snapshot} does not exist yet: "
                f"run `urlsieve compile --config {args.file}`"
            )
        else:
            problems.append(f"snapshot {config.snapshot} does not exist and no lists are set")
    if config.overlay:
        lines += _overlay_lines(config.overlay)
    if args.url and not problems:
        lines += _decisions(config, args.url, problems)
    overridden = sorted(name for name in ENV_VARS if name in os.environ)
    if overridden:
        lines.append(f"environment overrides: {', '.join(overridden)}")
    try:
        config.read_token()
    except ConfigError as exc:
        problems.append(str(exc))
    print("\n".join(lines))
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    print("configuration OK")
    return 0


def _overlay_lines(overlay: str) -> list[str]:
    """What the learned overlay holds: its rules, and the hosts promoted whole."""
    if not os.path.exists(overlay):
        return [f"learned: overlay {overlay} does not exist yet (nothing learned)"]
    try:
        info = read_snapshot_info(overlay, verify=True)
    except SnapshotError as exc:
        return [f"learned: overlay {overlay} cannot be read: {exc}"]
    from urlsieve.filter import Filter

    flt = Filter.load(overlay)
    try:
        hosts = [r for r in flt.rules if "/" not in r.pattern and not r.pattern.startswith("=")]
    finally:
        flt.close()
    shown = ", ".join(f"{r.pattern} ({r.action} {r.category})" for r in hosts[:10])
    more = f", … {len(hosts) - 10} more" if len(hosts) > 10 else ""
    return [
        f"learned: {info.rules} rules in the overlay, {len(hosts)} whole hosts"
        + (f": {shown}{more}" if hosts else "")
    ]


def _decisions(config: GatewayConfig, urls: list[str], problems: list[str]) -> list[str]:
    """The gateway's decision for each URL: the rule (base, else learned, with its
    evidence), or what the unknown setting does."""
    from urlsieve.exceptions import InvalidURL

    rules = filter_loader(config)()
    lines = []
    try:
        for url in urls:
            try:
                explanation = rules.explain(url)
            except InvalidURL as exc:
                problems.append(f"--url {url!r}: {exc.reason}")
                continue
            rule = explanation.rule
            if rule is None:
                lines.append(
                    f"url {url}: unknown: learn.unknown = {config.unknown_policy}"
                    + (" (queued for learning)" if config.learn_queue else "")
                )
                continue
            lines.append(f"url {url}: {rule.action} ({rule.category}) by {rule.where}")
            if explanation.evidence:
                lines.append(f"  learned: {explanation.evidence}")
    finally:
        rules.close()
    return lines
