"""``urlsieve squid-helper``: the Squid url_rewrite / external ACL helper on stdin/stdout."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, cast

from urlsieve._accel import slow_path_message
from urlsieve.cli._gateway import add_rule_options, rule_overrides
from urlsieve.config import (
    FailureMode,
    burst_gate,
    filter_loader,
    load_config,
    policy_loader,
    rules_notify,
    rules_watch,
    unknown_feed,
)
from urlsieve.console.stream import HelperTap
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import POLICY_FALLBACK_PAGE, PolicyHelper
from urlsieve.gateway.protocol import HelperMode, parse_request
from urlsieve.gateway.squid import (
    HelperSettings,
    HelperStats,
    SquidHelper,
    serve,
    stderr_logger,
)
from urlsieve.gateway.unknown import UnknownStats
from urlsieve.policy.blocklog import RequestLog

_CHANNELS = {"auto": None, "yes": True, "no": False}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "squid-helper",
        help="answer Squid url_rewrite_program / external_acl_type requests",
        description=(
            "Read Squid helper requests on standard input and answer on standard output: "
            '--mode redirect (OK status=302 url="block page" / ERR), rewrite '
            '(OK rewrite-url="block page" / ERR) or acl (external_acl_type: OK tag=category '
            "for a blocked URL, ERR otherwise). Channel IDs (concurrency > 0) are recognised "
            "and echoed. Reloads the snapshot on SIGHUP and when the file changes. Options "
            "override URLSIEVE_* environment variables, which override the config file."
        ),
    )
    add_rule_options(p)
    p.add_argument(
        "--squidguard-conf",
        metavar="FILE",
        help="decide by this squidGuard.conf as it is (sources, times, ACLs, dests)",
    )
    p.add_argument(
        "--json-log",
        metavar="FILE",
        help="with a policy: log every decision as a JSON line (squidGuard's log fields, the "
        "rule and file:line that decided); reopened on SIGHUP",
    )
    p.add_argument("--mode", choices=[m.value for m in HelperMode], help="reply form")
    p.add_argument("--redirect-url", metavar="TEMPLATE", help="block page (%%u %%c %%a …)")
    p.add_argument("--redirect-status", type=int, metavar="30N", help="redirect status")
    p.add_argument(
        "--failure-mode",
        choices=[m.value for m in FailureMode],
        help="when no rules can be loaded: block (closed, default) or allow (open)",
    )
    p.add_argument(
        "--channels",
        choices=sorted(_CHANNELS),
        default="auto",
        help="Squid sends channel IDs (concurrency > 0): yes, no, or auto-detect",
    )
    p.set_defaults(run=run)


def unknown_summary(stats: HelperStats, fed: UnknownStats) -> str:
    """The exit line's part on unknown URLs: how they were answered and where their
    sightings went, each list adding up to the unknown count."""
    left = f", {fed.buffered} still buffered" if fed.buffered else ""
    return (
        f"{stats.unknown} unknown (answered: {stats.unknown_passed} passed, "
        f"{stats.unknown_pending} pending, {stats.unknown_blocked} blocked; learning: "
        f"{fed.delivered} queued, {fed.merged} merged with a buffered sighting, "
        f"{fed.dropped} dropped, {fed.unsent} unsent at exit{left}; "
        f"{fed.sink_errors} queue errors)"
    )


def helper_tap(path: str, helper: SquidHelper, log: Callable[[str], None]) -> HelperTap:
    """The decision stream of a filter helper: its batches, read again in a thread."""
    escaped = helper.settings.mode is HelperMode.ACL
    channels = helper.settings.channels

    def parse(line: bytes) -> tuple[str, str | None, str | None]:
        request = parse_request(line, channels=channels, escaped=escaped)
        return request.target, request.client, request.user

    def check(url: str) -> tuple[str | None, str | None]:
        verdict = helper.rules.get().check(url)
        rule = verdict.rule
        return (verdict.category if rule else None), (rule.where if rule else None)

    return HelperTap(path, check, parse=parse, log=log)


def run(args: argparse.Namespace) -> int:
    overrides = {
        **rule_overrides(args),
        "mode": args.mode,
        "redirect_url": args.redirect_url,
        "redirect_status": args.redirect_status,
        "failure_mode": args.failure_mode,
        "squidguard_conf": args.squidguard_conf,
    }
    config = load_config(args.config, env=os.environ, overrides=overrides, helper=True)
    log = stderr_logger("urlsieve squid-helper")
    if (slow := slow_path_message()) is not None:
        log(slow)
    policy = policy_loader(config, log)
    rules = LiveRules(
        policy or filter_loader(config, log),
        watch=rules_watch(config),
        check_seconds=config.reload_check_seconds,
        notify=rules_notify(config),
        log=log,
    )
    if not rules.loaded:
        log(f"starting without rules, failure mode {config.failure_mode.value}: {rules.error}")
    request_log = RequestLog(args.json_log, log=log) if policy else None
    if args.json_log and not policy:
        raise ConfigError("--json-log needs a policy (--squidguard-conf, or [[acl]] tables)")
    rules.install_sighup(*([request_log.reopen] if request_log is not None else []))
    try:
        settings = HelperSettings(
            # A policy's ACLs give block pages; this one serves an ACL that gives none.
            redirect_url=config.redirect_url or (POLICY_FALLBACK_PAGE if policy else None),
            redirect_status=config.status,
            # A policy's block pages come from its ACLs (squidGuard's replies: rewrite-url).
            mode=config.mode
            if config.origins.get("mode") != "default" or not policy
            else HelperMode.REWRITE,
            failure_mode=config.failure_mode,
            channels=_CHANNELS[args.channels],
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    stream: Any = None
    if policy:
        sink = request_log
        if config.decision_log:
            from urlsieve.console.stream import PolicyStream, TeeLog

            stream = PolicyStream(config.decision_log, log=log)
            # TeeLog has RequestLog's two methods the helper calls (wanted, record).
            sink = cast(RequestLog, TeeLog(*([request_log] if request_log else []), stream))
        helper: SquidHelper = PolicyHelper(rules, settings, log=log, request_log=sink)
    else:
        feed = unknown_feed(config, log)
        block = config.unknown_policy == "block"
        helper = SquidHelper(
            rules,
            settings,
            log=log,
            unknown=feed,
            block_unknown=block,
            burst=burst_gate(config, log) if feed is not None else None,
            pending=config.pending,
            pending_url=config.pending_url,
        )
        if config.decision_log:
            stream = helper_tap(config.decision_log, helper, log)
    try:
        status = serve(helper, tap=stream.observe if isinstance(stream, HelperTap) else None)
    finally:
        if stream is not None:
            stream.close()
        if helper.unknown is not None:
            helper.unknown.close()
        if request_log is not None:
            request_log.close()
            logged = request_log.stats
            if logged.written or logged.errors or logged.dropped:
                log(
                    f"request logs: {logged.written} lines written, {logged.dropped} dropped "
                    f"(queue full), {logged.errors} not written"
                    + (f" (last: {logged.last_error})" if logged.last_error else "")
                )
    stats = helper.stats
    learning = ""
    if helper.unknown is not None:
        learning = ", " + unknown_summary(stats, helper.unknown.stats)
    log(
        f"end of input: {stats.requests} requests, {stats.blocked} blocked, "
        f"{stats.allowed} allowed, {stats.failures} failures, {stats.bad_lines} bad lines"
        + learning
    )
    return status
