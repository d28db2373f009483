"""What a configuration will do, in words (``urlsieve config check``)."""

from __future__ import annotations

from urlsieve.gateway.config import FailureMode, GatewayConfig
from urlsieve.gateway.protocol import HelperMode

__all__ = ["describe"]


def describe(config: GatewayConfig) -> list[str]:
    """Human-readable lines saying what the gateway will do with this configuration."""

    def origin(name: str) -> str:
        where = config.origins.get(name, "default")
        return "" if where == "default" else f"  [{where}]"

    out = [f"config file: {config.source_file or '(none)'}"]
    if config.snapshot:
        out.append(f"rules: compiled snapshot {config.snapshot}{origin('snapshot')}")
        if config.lists:
            out.append("  (`urlsieve compile --config FILE` rebuilds it from the lists below)")
    for name, label in (("lists", "block lists"), ("allow", "allow lists")):
        items = getattr(config, name)
        out.append(f"{label}: {', '.join(items) if items else '(none)'}{origin(name)}")
    categories = ", ".join(config.categories) if config.categories else "all in the lists"
    out.append(f"categories blocked: {categories}{origin('categories')}")
    if config.policy is not None or config.squidguard_conf:
        out.append(
            "policy: "
            + (
                f"squidGuard configuration {config.squidguard_conf}"
                if config.squidguard_conf
                else "the [[source]]/[[time]]/[[acl]] tables of this file"
            )
            + "; block pages come from its ACLs and destinations"
        )
    if not config.helper_configured:
        out.append("squid helper: not configured (no [squid] options)")
    elif config.mode is HelperMode.ACL:
        out.append(
            "squid helper: external_acl_type form: OK (blocked, tag=category) / ERR (allowed)"
            + origin("mode")
        )
    else:
        verb = "redirects" if config.mode is HelperMode.REDIRECT else "rewrites"
        status = f" with status {config.status}" if config.mode is HelperMode.REDIRECT else ""
        page = config.redirect_url or "the policy's block pages"
        out.append(
            f"squid helper: url_rewrite_program form: {verb} blocked URLs to "
            f"{page}{status}{origin('mode')}"
        )
    fail = (
        "block every request and log why"
        if config.failure_mode is FailureMode.CLOSED
        else "allow every request and log why"
    )
    out.append(
        f"when no rules can be loaded: {fail} "
        f"(failure_mode={config.failure_mode.value}){origin('failure_mode')}"
    )
    out.append(
        f"reload: on SIGHUP, and on a snapshot change (checked every "
        f"{config.reload_check_seconds:g} s){origin('reload_check_seconds')}"
    )
    out.append(f"service: listens on {config.bind}{origin('bind')}")
    if config.token_file:
        out.append(f"service reload: token from {config.token_file}{origin('token_file')}")
    elif config.token:
        out.append(f"service reload: token set (hidden){origin('token')}")
    else:
        out.append("service reload: disabled (no service.token or service.token_file)")
    out.append(f"seen store: {config.seen_store or '(none: POST /v1/seen answers 404)'}")
    unknown = config.unknown_policy
    if config.learn_queue:
        out.append(
            f"unknown URLs: {unknown}, queued for learning in {config.learn_queue}"
            f"{origin('unknown')}"
        )
        if unknown == "allow-first" and config.pending != "pass":
            out.append(
                f"unknown sites: {config.burst} requests of a site pass, then "
                f"{'a checking page' if config.pending == 'check' else 'a block'} until "
                f"its verdict (learn.burst, learn.pending){origin('burst')}"
            )
    else:
        out.append(f"unknown URLs: allowed (no learn.queue: learning is off){origin('unknown')}")
    if config.overlay:
        out.append(f"learned rules: overlay snapshot {config.overlay}{origin('overlay')}")
    out.append(
        f"decision stream: {config.decision_log or '(off: console.decision_log)'}"
        f"{origin('decision_log')}"
    )
    login = "password hash" if config.console_password_hash else None
    if config.token or config.token_file:
        login = f"{login} or the service token" if login else "the service token"
    out.append(
        f"console: /console/ for {', '.join(config.console_clients)}"
        f"{origin('console_clients')}, login by "
        f"{login or 'nothing (off: set console.password_hash)'}"
        f", sessions of {config.console_session_minutes:g} min"
    )
    return out
