"""The verdicts: ``GET /v1/check`` (one URL), ``POST /v1/check`` (a batch) and ``GET
/v1/explain``, with what a verdict hands on: the learning hook (unknown URLs, the burst
cap), the decision metrics and the decision stream."""

from __future__ import annotations

import time
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Filter
from urlsieve.gateway.unknown import PENDING_CATEGORY, UNKNOWN_CATEGORY, BurstGate, site_of
from urlsieve.match.base import Explanation, Verdict
from urlsieve.policy.engine import BLOCK, WARN, Decision, PolicyEngine, Who
from urlsieve.rules.model import Rule
from urlsieve.service.errors import ApiError
from urlsieve.service.openapi import WHO, Endpoints, errors, json_body, json_ok, ref, url_param
from urlsieve.service.reading import (
    _chars,
    _json_body,
    _off_loop,
    _url_list,
    _url_param,
    _who,
)
from urlsieve.service.state import ServiceState, _loaded, _rules, _state

API = Endpoints()


def rule_json(rule: Rule | None) -> dict[str, Any] | None:
    if rule is None:
        return None
    return {
        "pattern": rule.pattern,
        "action": rule.action,
        "category": rule.category,
        "source": rule.source,
        "line": rule.line,
    }


def verdict_json(url: str, verdict: Verdict) -> dict[str, Any]:
    return {
        "url": url,
        "action": verdict.action,
        "category": verdict.category,
        "canonical": verdict.canonical,
        "rule": rule_json(verdict.rule),
    }


def explanation_json(explanation: Explanation) -> dict[str, Any]:
    return {
        "url": explanation.url,
        "canonical": explanation.canonical,
        "action": explanation.verdict.action,
        "category": explanation.verdict.category,
        "matching": list(explanation.matching),
        "probes": list(explanation.probes),
        "rule": rule_json(explanation.rule),
        "evidence": explanation.evidence,
    }


def invalid_url_json(url: str, exc: InvalidURL) -> dict[str, Any]:
    """A batch item's result for a URL the canonicaliser rejects."""
    return {"url": url, "error": "invalid_url", "detail": exc.reason}


def decision_json(url: str, decision: Decision | InvalidURL) -> dict[str, Any]:
    if isinstance(decision, InvalidURL):
        return invalid_url_json(url, decision)
    return {
        "url": url,
        "action": {BLOCK: "block", WARN: "warn"}.get(decision.action, "allow"),
        "category": decision.category if decision.action in (BLOCK, WARN) else None,
        "policy": {
            "source": decision.source,
            "acl": decision.acl,
            "within": decision.within,
            "decided_by": decision.category,
            "action": decision.action,
            "target": decision.target,
            "redirect_status": decision.status,
        },
    }


def _count_policy(state: ServiceState, decisions: list[Decision | InvalidURL]) -> None:
    state.metrics.count_policy(
        (d.source, d.acl, d.action) for d in decisions if not isinstance(d, InvalidURL)
    )


def _check_batch(rules: Filter, urls: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for url in urls:
        try:
            out.append(verdict_json(url, rules.check(url)))
        except InvalidURL as exc:
            out.append(invalid_url_json(url, exc))
    return out


async def _learn(request: Request, state: ServiceState, results: list[dict[str, Any]]) -> None:
    """Queue the URLs no rule decides (learning on); with ``learn.unknown = "block"`` they
    are blocked until classified, with the first-time allow a site past its burst
    (``learn.burst``) gets the pending answer: ``block`` with category ``pending``
    (``learn.pending = "check"``: the client shows ``/v1/pending``) or ``unclassified``
    (``"block"``), and ``"pending": true``. Each such result says ``"unknown": true``."""
    feed = state.unknown
    if feed is None:
        return
    client = request.scope.get("client")
    peer = client[0] if client else None
    unknown = [result for result in results if result.get("action") == "none"]
    for result in unknown:
        feed.add(result["url"], peer)  # as asked: the filter's form drops the port
        result["unknown"] = True
        if state.block_unknown:
            result["action"] = "block"
            result["category"] = UNKNOWN_CATEGORY
    gate = state.burst
    if gate is None or state.block_unknown or not unknown:
        return
    clean: frozenset[str] = getattr(_rules(state), "clean_domains", frozenset())
    passes = await run_in_threadpool(_within_burst, gate, clean, [r["url"] for r in unknown])
    category = PENDING_CATEGORY if state.pending == "check" else UNKNOWN_CATEGORY
    for result, passed in zip(unknown, passes, strict=True):
        if not passed:
            result["action"] = "block"
            result["category"] = category
            result["pending"] = True


def _within_burst(gate: BurstGate, clean: frozenset[str], urls: list[str]) -> list[bool]:
    """Per URL whether it passes: its site known clean, or within the site's burst."""
    out = []
    for url in urls:
        site = site_of(url)
        out.append(site is not None and (site in clean or gate.allow(site)))
    return out


def _count(state: ServiceState, results: list[dict[str, Any]]) -> None:
    state.metrics.count_decisions(
        (r["action"], r["category"] or "-") for r in results if "action" in r
    )


def _stream(
    state: ServiceState,
    results: list[dict[str, Any]],
    who: Who | None,
    request: Request | None = None,
) -> None:
    """Hand the results to the decision stream (``console.decision_log``), if it is on."""
    writer = state.decisions
    if writer is None:
        return
    from urlsieve.console.stream import service_events

    if who is None and request is not None:
        client = request.scope.get("client")
        who = Who(client[0] if client else None)
    events = service_events(results, who.client if who else None, who and who.user, time.time())
    for item in events:
        writer.record(item)
    if state.console is not None:  # this process's own: to the live view without the file
        state.console.own(events)


@API.get(
    "/v1/check",
    "Verdict for one URL",
    params=(url_param("the URL to check"), *WHO),
    responses={"200": json_ok("Verdict", "the verdict"), **errors(400, 403, 422, 503)},
)
async def check_one(request: Request) -> Response:
    state = _state(request)
    url = _url_param(request)
    loaded = _loaded(state)
    if isinstance(loaded, PolicyEngine):
        who = _who(request, state)
        decided = (await _off_loop(len(url), loaded.decide_many, [url], [who]))[0]
        if isinstance(decided, InvalidURL):
            raise ApiError(422, "invalid_url", f"{decided.reason}: {url[:200]!r}")
        result = decision_json(url, decided)
        _count(state, [result])
        _count_policy(state, [decided])
        _stream(state, [result], who)
        return JSONResponse(result)
    rules = loaded
    try:
        result = verdict_json(url, await _off_loop(len(url), rules.check, url))
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url[:200]!r}") from None
    await _learn(request, state, [result])
    _count(state, [result])
    _stream(state, [result], None, request)
    return JSONResponse(result)


@API.post(
    "/v1/check",
    "Verdicts for a batch of URLs",
    params=WHO,
    body=json_body(ref("UrlBatch")),
    responses={
        "200": json_ok("VerdictBatch", "one result per URL, in order"),
        **errors(400, 403, 408, 413, 503),
    },
)
async def check_batch(request: Request) -> Response:
    state = _state(request)
    data = await _json_body(request, state.limits)
    urls = _url_list(data)
    loaded = _loaded(state)
    cost = _chars(urls)
    if isinstance(loaded, PolicyEngine):
        who = _who(request, state, data)
        decided = await _off_loop(cost, loaded.decide_many, urls, [who] * len(urls))
        results = [decision_json(u, d) for u, d in zip(urls, decided, strict=True)]
        _count(state, results)
        _count_policy(state, decided)
        _stream(state, results, who)
        return await _off_loop(cost, JSONResponse, {"results": results})
    rules = loaded
    results = await _off_loop(cost, _check_batch, rules, urls)
    await _learn(request, state, results)
    _count(state, results)
    _stream(state, results, None, request)
    return await _off_loop(cost, JSONResponse, {"results": results})


@API.get(
    "/v1/explain",
    "Why a URL gets its verdict",
    params=(url_param("the URL to explain"),),
    responses={
        "200": json_ok("Explanation", "canonical form, probes, deciding rule"),
        **errors(400, 422, 503),
    },
)
async def explain(request: Request) -> Response:
    state = _state(request)
    url = _url_param(request)
    rules = _rules(state)
    try:
        explanation = await _off_loop(len(url), rules.explain, url)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url[:200]!r}") from None
    return JSONResponse(explanation_json(explanation))
