"""The HTTP lookup service (Starlette; run it with ``urlsieve serve`` on uvicorn).

Endpoints (the OpenAPI document is served at ``/openapi.json``):

=====================  ==============================================================
``GET /v1/check``      ``?url=``: the verdict for one URL
``POST /v1/check``     ``{"urls": [...]}``: verdicts for a batch (at most 10,000)
``GET /v1/explain``    ``?url=``: canonical form, expressions probed, deciding rule
``GET /v1/continue``   ``?url=``: the confirmation page of a policy warning (no grant)
``POST /v1/continue``  the page's form (``url``, ``token``): grant, then 303 to the URL
``GET /v1/pending``    ``?url=``: the "checking this site" page of an unknown site
``POST /v1/seen``      ``{"op": "add"|"test", "urls": [...]}`` on the configured seen store
``GET /metrics``       Prometheus text: requests, decisions, latency, snapshot version/age
``GET /healthz``       200 when rules are loaded, 503 (with the reason) when not
``POST /v1/reload``    reload the rules; ``Authorization: Bearer <token>``
=====================  ==============================================================

With a learner configured (``[learn]`` with ``learn.directory``, wired by ``urlsieve
serve``) and a token, the review and override endpoints, all ``Authorization: Bearer
<token>`` (404 when either is missing):

=============================  ======================================================
``GET /v1/learn/verdicts``     ``?source=&action=&limit=&offset=``: a page of verdicts
``GET /v1/learn/verdict``      ``?url=``: what was learned about a URL (404: nothing)
``POST /v1/learn/allow``       ``{"url", "note"?}``: allow whatever is learned
``POST /v1/learn/block``       ``{"url", "category"?, "note"?}``: block whatever is learned
``POST /v1/learn/forget``      ``{"url"}``: drop the verdict (or override)
=============================  ======================================================

A write rebuilds the overlay snapshot and reloads it into this service before it
answers; overrides survive re-learning.

Every error is a JSON body ``{"error": code, "detail": text}`` with a 4xx status
for a bad request, whatever its bytes (a 5xx only for the server's own state, e.g.
no rules loaded). The body is read against :class:`ServiceLimits` (size, time) and
parsed strictly (UTF-8, no duplicate keys, no ``NaN``, bounded numbers and nesting).
The rules, their reloader and the seen store are created in the lifespan, not at
import; reloads (file change, SIGHUP, ``POST /v1/reload``) run off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import json
import math
import secrets
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, TypeVar
from urllib.parse import unquote_to_bytes

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from urlsieve import __version__
from urlsieve.exceptions import ConfigError, InvalidURL, LearnError, StoreError
from urlsieve.filter import Filter
from urlsieve.fingerprint import canonical_bytes
from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.headers import (
    FORWARDING_HEADERS,
    address_key,
    framing_problem,
    last_named,
    named_addresses,
)
from urlsieve.gateway.learning import ACTIONS, SOURCES, LearnReview
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.metrics import CONTENT_TYPE, Metrics
from urlsieve.gateway.pending import pending_page
from urlsieve.gateway.ruleset import (
    filter_loader,
    policy_loader,
    rules_info,
    rules_notify,
    rules_watch,
)
from urlsieve.gateway.unknown import (
    PENDING_CATEGORY,
    UNKNOWN_CATEGORY,
    BurstGate,
    UnknownFeed,
    site_of,
)
from urlsieve.match.base import Explanation, Verdict
from urlsieve.policy.clients import AddressSet, parse_address
from urlsieve.policy.engine import BLOCK, WARN, Decision, PolicyEngine, Who
from urlsieve.rules.model import Rule
from urlsieve.seen import SeenStore, open_seen

__all__ = ["MAX_BATCH", "ServiceLimits", "ServiceState", "create_app"]

T = TypeVar("T")

MAX_BATCH = 10_000
#: Work up to this size (URLs, characters) is done on the event loop; more goes to a thread.
INLINE_BATCH = 256
INLINE_CHARS = 8_192
#: The longest number a body may hold (no field takes a number; this only bounds parsing).
MAX_NUMBER_DIGITS = 64
#: The file-change check never runs more often than this, whatever reload_check_seconds says.
MIN_CHECK_SECONDS = 0.1
#: How often the reloader reads the learned overlay's change counter (one ``pread``).
NOTICE_SECONDS = MIN_CHECK_SECONDS
#: ``GET /v1/learn/verdicts``: the default and the largest page, and the largest offset.
LEARN_PAGE = 100
MAX_LEARN_PAGE = 1000
MAX_LEARN_OFFSET = 10**9
#: Seconds the confirmation page of a warning (``GET /v1/continue``) stays good for.
CONFIRM_SECONDS = 600
#: Bytes of the confirmation form (``POST /v1/continue``: the URL and the token).
MAX_CONFIRM_BODY = 64 << 10
#: The fields a learn write body may hold, per endpoint.
_LEARN_FIELDS = {
    "allow": ("url", "note"),
    "block": ("url", "category", "note"),
    "forget": ("url",),
}


@dataclass(frozen=True)
class ServiceLimits:
    """The service's hard caps; the defaults are documented in the README (Lookup service).

    ``max_body`` and ``body_timeout`` are enforced by the application; the others by
    the server (:mod:`urlsieve.gateway.server`, ``urlsieve serve``).
    """

    #: Bytes of a request body; a larger one is refused (413) before or while it is read.
    max_body: int = 8 << 20
    #: Seconds to receive a whole request body (408 after).
    body_timeout: float = 30.0
    #: Seconds from connecting (or from the first byte of the next request) to the end of
    #: the request headers; a slower client gets 408 and is disconnected.
    header_timeout: float = 10.0
    #: Open connections; one more is answered 503 and closed at once.
    max_connections: int = 512
    #: Bytes of a request line and headers (uvicorn's h11_max_incomplete_event_size).
    max_header_bytes: int = 64 << 10
    #: Seconds an idle keep-alive connection is kept open.
    keep_alive: int = 5


@dataclass
class ServiceState:
    """What the lifespan creates and the endpoints share."""

    rules: LiveRules[Filter | PolicyEngine]
    metrics: Metrics
    seen: SeenStore | None
    token: str | None
    limits: ServiceLimits = field(default_factory=ServiceLimits)
    reloader: Reloader | None = None
    #: Peers whose client fields and headers are believed (a policy's who-asks).
    trusted: AddressSet = field(default_factory=AddressSet)
    client_header: str | None = None
    user_header: str | None = None
    #: Where URLs no rule decides go for learning, and whether they are blocked meanwhile.
    unknown: UnknownFeed | None = None
    block_unknown: bool = False
    #: The cap on requests of an unknown site (allow-first), and what comes past it.
    burst: BurstGate | None = None
    pending: str = "check"
    #: The learned verdicts, for review and override (``/v1/learn/*``); None: off.
    learn: LearnReview | None = None
    #: What continue confirmations are signed with (:func:`continue_key`).
    continue_key: bytes = field(default_factory=lambda: continue_key(None))
    #: The decision stream's writer (``console.decision_log``; urlsieve.console.stream).
    decisions: Any = None
    #: The block pages and the console (urlsieve.console.web.Console); None: no Jinja2.
    console: Any = None


class Reloader:
    """Reloads the rules off the event loop, one reload at a time.

    :meth:`run` checks the watched snapshot every ``check_seconds`` and reloads at
    once after :meth:`request` (the SIGHUP handler); ``POST /v1/reload`` goes
    through :meth:`reload`. Every reload except the first load is counted by
    :class:`LiveRules` (``reloads``, ``failed_reloads``), whatever started it.
    """

    def __init__(
        self,
        rules: LiveRules[Filter],
        check_seconds: float,
        log: Callable[[str], None] = lambda _msg: None,
    ) -> None:
        self.rules = rules
        self.check_seconds = max(check_seconds, MIN_CHECK_SECONDS)
        self._log = log
        self._lock = anyio.Lock()
        self._wake = anyio.Event()

    def request(self) -> None:
        """Reload as soon as possible (call on the event loop, e.g. from a signal handler)."""
        self.rules.request_reload()
        self._wake.set()

    async def run(self) -> None:
        while True:
            with anyio.move_on_after(self.check_seconds):
                await self._wake.wait()
            self._wake = anyio.Event()
            try:
                await self.poll()
            except Exception as exc:  # the reloader must outlive any load error
                self._log(f"reload check failed, keeping the rules: {type(exc).__name__}: {exc}")

    async def poll(self) -> bool:
        async with self._lock:
            return await run_in_threadpool(self.rules.poll)

    async def reload(self) -> bool:
        async with self._lock:
            return await run_in_threadpool(self.rules.reload)


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, *, close: bool = False) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.close = close  # ask the server to close the connection (unread body)
        super().__init__(detail)


def _error(status: int, code: str, detail: str, *, close: bool = False) -> JSONResponse:
    headers = {"connection": "close"} if close else None
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


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


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.urlsieve
    return state


def _loaded(state: ServiceState) -> Filter | PolicyEngine:
    try:
        return state.rules.get()
    except NoRules as exc:
        raise ApiError(503, "no_rules", str(exc)) from None


def _filter_of(loaded: Filter | PolicyEngine) -> Filter:
    """The rules of what is loaded (a policy's own rules when a policy is configured)."""
    return loaded.rules if isinstance(loaded, PolicyEngine) else loaded


def _rules(state: ServiceState) -> Filter:
    return _filter_of(_loaded(state))


def _peer(request: Request, state: ServiceState) -> str | None:
    """The peer address the server gives (``scope["client"]``); 403 when a forwarding
    header names it: that is the mark of a server that took the address from the header
    (uvicorn's ``proxy_headers``), so it may be any client's claim."""
    client = request.scope.get("client")
    host: str | None = client[0] if client else None
    if not host:
        return None
    key = address_key(host)
    headers = set(FORWARDING_HEADERS)
    if state.client_header:
        headers.add(state.client_header.lower())
    for header in sorted(headers):
        named = named_addresses(header, request.headers.getlist(header))
        if any(address_key(address) == key for address in named):
            raise ApiError(
                403,
                "forwarded_peer",
                f"the peer address {host[:64]!r} is one that {header} names: the server in "
                "front of the application took it from that header. Run it with its "
                "proxy-header handling off (uvicorn: --no-proxy-headers, "
                "proxy_headers=False; urlsieve serve does) and list the proxy in "
                "service.trusted_proxies (with service.client_header) instead",
            )
    return host


def _who(request: Request, state: ServiceState, body: dict[str, Any] | None = None) -> Who:
    """Who asks, for a policy: the TCP peer's address, unless the peer is a trusted proxy
    (``service.trusted_proxies``), whose word is taken from ``?client=``/``?user=``/
    ``?client_name=`` (or the body's fields), else from the configured headers (of
    ``service.client_header``, the last address: the one the proxy appended). An
    untrusted caller cannot claim to be another client: its fields are refused (403), its
    forwarding headers are ignored."""
    peer = _peer(request, state)
    fields: dict[str, str | None] = {"client": peer}
    given: dict[str, str] = {}
    query = request.scope.get("query_string", b"")
    for name in ("client", "user", "client_name"):
        values = _query_values(query, name.encode())
        if body is not None and isinstance(body.get(name), str):
            values.append(body[name].encode("utf-8", "surrogatepass"))
        if len(values) > 1:
            raise ApiError(400, "repeated_field", f"{name} is given {len(values)} times")
        if values:
            given[name] = values[0].decode("utf-8", "replace")[:256]
    trusted = peer is not None and peer in state.trusted
    headed = {
        name
        for name, header in (("client", state.client_header), ("user", state.user_header))
        if header
    }
    if trusted and headed & set(given):
        # A proxy that names the client in a header passes query strings on unchanged:
        # a field there would be the client's own claim.
        raise ApiError(
            403,
            "untrusted_client_fields",
            f"{', '.join(sorted(headed & set(given)))} come from the configured headers "
            "(service.client_header / service.user_header), not from the request",
        )
    if given and not trusted:
        raise ApiError(
            403,
            "untrusted_client_fields",
            f"{', '.join(sorted(given))} may only be set by a trusted proxy "
            "(service.trusted_proxies); the peer address is used otherwise",
        )
    if trusted and state.client_header and "client" not in given:
        named = last_named(state.client_header, request.headers.getlist(state.client_header))
        if named:
            given["client"] = named[:256]
    if trusted and state.user_header and "user" not in given:
        lines = request.headers.getlist(state.user_header)
        user = lines[-1].rpartition(",")[2].strip() if lines else ""
        if user:
            given["user"] = user[:256]
    fields.update(given)
    return Who(fields.get("client"), fields.get("client_name"), fields.get("user"))


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


async def _off_loop(cost: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, in a worker thread when ``cost`` (characters) is large."""
    if cost > INLINE_CHARS:
        return await run_in_threadpool(fn, *args)
    return fn(*args)


# -- reading requests -----------------------------------------------------------------


def _query_values(query: bytes, name: bytes) -> list[bytes]:
    """Every value of ``name`` in a query string, percent-decoded to bytes (linear)."""
    values = []
    for field_ in query.split(b"&"):
        key, _, value = field_.partition(b"=")
        if unquote_to_bytes(key.replace(b"+", b" ")) == name:
            values.append(unquote_to_bytes(value.replace(b"+", b" ")))
    return values


def _url_param(request: Request) -> str:
    """The one ``?url=`` parameter, percent-decoded as UTF-8."""
    values = _query_values(request.scope.get("query_string", b""), b"url")
    if len(values) > 1:
        raise ApiError(
            400,
            "repeated_url",
            f"?url= is given {len(values)} times: pass one URL (POST /v1/check takes a batch)",
        )
    url = _decoded_url(values[0] if values else b"", "?url=")
    if not url.strip():
        raise ApiError(400, "missing_url", "pass the URL to check as ?url=…")
    return url


def _decoded_url(raw: bytes, where: str) -> str:
    """A percent-decoded URL as UTF-8; 400 saying where and which byte otherwise."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(
            400,
            "invalid_query",
            f"{where} is not UTF-8 once percent-decoded (byte 0x{raw[exc.start]:02x} at "
            f"offset {exc.start}): percent-encode the URL's own escapes (%FF as %25FF)",
        ) from None


def _declared_length(request: Request, limit: int) -> int | None:
    value = request.headers.get("content-length")
    if value is None:
        return None
    value = value.strip()
    if not (value.isascii() and value.isdigit()):
        raise ApiError(400, "invalid_content_length", f"Content-Length {value[:40]!r}", close=True)
    return limit + 1 if len(value) > len(str(limit)) else int(value)


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413, "body_too_large", f"the request body is over {limit} bytes (the limit)", close=True
    )


async def _read_body(request: Request, limits: ServiceLimits) -> bytes:
    """The body, read chunk by chunk and refused as soon as it passes ``max_body``."""
    declared = _declared_length(request, limits.max_body)
    if declared is not None and declared > limits.max_body:
        raise _too_large(limits.max_body)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(limits.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limits.max_body:
                    raise _too_large(limits.max_body)
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            "body_timeout",
            f"the request body did not arrive within {limits.body_timeout:g} s "
            f"({size} bytes received)",
            close=True,
        ) from None
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client went away", close=True) from None
    return b"".join(chunks)


def _bad_json(detail: str) -> NoReturn:
    raise ApiError(400, "invalid_json", detail)


def _number(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        _bad_json(
            f"the body holds a number of {len(text)} characters (at most {MAX_NUMBER_DIGITS})"
        )
    number = float(text)
    if not math.isfinite(number):
        _bad_json(f"the number {text} is out of range")
    return number


def _constant(name: str) -> NoReturn:
    _bad_json(f"{name} is not JSON")


def _first_repeated(keys: list[str]) -> str:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return ""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        key = _first_repeated([k for k, _ in pairs])
        _bad_json(f"the key {key[:80]!r} appears twice in one object")
    return out


def _parse_json(body: bytes) -> dict[str, Any]:
    """A JSON object from UTF-8 bytes, or :class:`ApiError` (400) saying what is wrong and where."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        _bad_json(f"the body is not UTF-8: byte 0x{body[exc.start]:02x} at offset {exc.start}")
    try:
        data = json.loads(
            text,
            parse_int=_number,
            parse_float=_number,
            parse_constant=_constant,
            object_pairs_hook=_object,
        )
    except RecursionError:
        _bad_json("the body nests arrays or objects too deeply")
    except ValueError as exc:
        _bad_json(f"the body is not JSON: {exc}")
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_body", f"the body must be a JSON object, not {_kind(data)}")
    return data


async def _json_body(request: Request, limits: ServiceLimits) -> dict[str, Any]:
    body = await _read_body(request, limits)
    return await _off_loop(len(body), _parse_json, body)


def _kind(value: object) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _url_list(data: dict[str, Any]) -> list[str]:
    if "urls" not in data:
        raise ApiError(400, "invalid_body", 'the body has no "urls": send {"urls": ["http://…"]}')
    urls = data["urls"]
    if not isinstance(urls, list):
        raise ApiError(
            400, "invalid_body", f'"urls" must be an array of strings, not {_kind(urls)}'
        )
    if len(urls) > MAX_BATCH:
        raise ApiError(413, "batch_too_large", f"{len(urls)} URLs: at most {MAX_BATCH} per batch")
    for index, url in enumerate(urls):
        if not isinstance(url, str):
            raise ApiError(400, "invalid_body", f"urls[{index}] is {_kind(url)}, not a string")
        if not url.isascii():
            try:
                url.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate from a JSON \udcXX escape
                raise ApiError(
                    400, "invalid_body", f"urls[{index}] is not valid Unicode (lone surrogate)"
                ) from None
    return urls


def _seen_op(data: dict[str, Any]) -> str:
    if "op" not in data:
        raise ApiError(400, "invalid_body", 'the body has no "op": say "add" or "test"')
    op = data["op"]
    if op not in ("add", "test"):
        shown = repr(op[:40]) if isinstance(op, str) else _kind(op)
        raise ApiError(400, "invalid_body", f'"op" must be "add" or "test", not {shown}')
    return str(op)


def _chars(urls: list[str]) -> int:
    return len(urls) * (INLINE_CHARS // INLINE_BATCH) + sum(map(len, urls))


# -- endpoints --------------------------------------------------------------------------


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


def _http_url(url: str) -> str:
    """``url`` when it is an http(s) URL of printable ASCII (it goes into a Location
    header and a page as it is), else :class:`ApiError` 422."""
    if not url.lower().startswith(("http://", "https://")) or not (
        url.isascii() and url.isprintable() and " " not in url
    ):
        raise ApiError(
            422, "invalid_url", "continue takes an http(s) URL of printable ASCII (escaped)"
        )
    return url


async def _warning(
    request: Request, state: ServiceState, url: str
) -> tuple[PolicyEngine, Who, Decision]:
    """The policy, who asks and the warning they get for ``url``: 404 without a warn
    store, 409 when ``url`` is not behind a warning for them (never an open redirect)."""
    loaded = _loaded(state)
    if not isinstance(loaded, PolicyEngine) or loaded.grants is None:
        raise ApiError(404, "no_warn_store", "no policy with a warn_store is configured")
    _http_url(url)
    who = _who(request, state)
    try:
        decided = await run_in_threadpool(loaded.decide, url, who)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url[:200]!r}") from None
    except StoreError as exc:
        raise ApiError(503, "warn_store_unavailable", str(exc)) from None
    if decided.action != WARN:
        raise ApiError(409, "not_warned", f"{url[:200]!r} is not behind a warning for this client")
    return loaded, who, decided


def continue_key(token: str | None) -> bytes:
    """The key continue confirmations are signed with: drawn at random for one process,
    or derived from the service token when one is set (services sharing the token accept
    each other's confirmations, e.g. behind a load balancer)."""
    if token is None:
        return secrets.token_bytes(32)
    return hmac.new(token.encode(), b"urlsieve continue confirmation", hashlib.sha256).digest()


def confirmation(key: bytes, who: Who, url: str, expires: int) -> str:
    """The token of a continue confirmation: ``url`` for ``who`` until ``expires`` (Unix
    time), signed with ``key``."""
    message = json.dumps(["continue", list(who), url, expires]).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return f"{expires}.{base64.urlsafe_b64encode(digest).decode('ascii').rstrip('=')}"


def _confirmed(key: bytes, who: Who, url: str, token: bytes) -> bool:
    """Whether ``token`` confirms ``url`` for ``who`` and has not expired."""
    expires, _, _digest = token.partition(b".")
    if not (expires.isdigit() and len(expires) <= 12) or int(expires) < time.time():
        return False
    expected = confirmation(key, who, url, int(expires)).encode("ascii")
    return hmac.compare_digest(token, expected)


def _confirmation_page(url: str, category: str | None, minutes: int, token: str) -> str:
    shown = html.escape(url, quote=True)
    what = html.escape(category or "a warned category", quote=True)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>Continue past the warning?</title></head><body>\n"
        f"<h1>This site is in {what}</h1>\n"
        f"<p>You were warned about <code>{shown}</code>. Continue, and the site is let "
        f"through for you for {minutes} minutes.</p>\n"
        '<form method="post" action="continue">'
        f'<input type="hidden" name="url" value="{shown}">'
        f'<input type="hidden" name="token" value="{token}">'
        '<button type="submit">Continue to the site</button></form>\n</body></html>\n'
    )


#: The confirmation page is never framed, cached, or sent on as a referrer.
_PAGE_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


async def pending(request: Request) -> Response:
    """``GET /v1/pending?url=``: the "checking this site" page (:mod:`.pending`) for a URL
    of an unknown site past its burst; it reloads itself until the URL has a verdict, then
    sends the browser on (allowed) or says it is blocked. It reads the rules only: asking
    it queues nothing and counts nothing."""
    state = _state(request)
    url = _url_param(request)
    rules = _rules(state)
    try:
        verdict = await _off_loop(len(url), rules.check, url)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url[:200]!r}") from None
    if verdict.rule is not None:
        status = "blocked" if verdict.action == "block" else "allowed"
    else:
        site = site_of(url)
        status = "allowed" if site in getattr(rules, "clean_domains", ()) else "checking"
    page = pending_page(url, status, verdict.category)
    return HTMLResponse(page, headers=_PAGE_HEADERS)


async def continue_page(request: Request) -> Response:
    """``GET /v1/continue?url=``: the confirmation page for a warning this client gets
    (the warning page links here). It grants nothing: its form posts the URL back with a
    token tied to this client and this URL, for :data:`CONFIRM_SECONDS`."""
    state = _state(request)
    url = _url_param(request)
    engine, who, decided = await _warning(request, state, url)
    token = confirmation(state.continue_key, who, url, int(time.time()) + CONFIRM_SECONDS)
    minutes = max(1, engine.policy.warn_seconds // 60)
    if state.console is not None:  # the block page family's warning, in its language
        response: Response = state.console.warn_page(request, url, decided.category, minutes, token)
        return response
    page = _confirmation_page(url, decided.category, minutes, token)
    return HTMLResponse(page, headers=_PAGE_HEADERS)


def _form_field(body: bytes, name: str) -> bytes:
    values = _query_values(body, name.encode())
    if len(values) != 1:
        raise ApiError(
            400, "invalid_form", f"the form must hold {name} once (it holds it {len(values)} times)"
        )
    return values[0]


async def continue_warned(request: Request) -> Response:
    """``POST /v1/continue`` (the confirmation page's form: ``url``, ``token``): the client
    chose to continue past a warning; it is let through to the URL's site for the
    policy's warn time, then sent on to the URL (303). Refused (403) without the token
    the page gave this client for this URL, and from another site's page."""
    state = _state(request)
    fetched_from = request.headers.get("sec-fetch-site")
    if fetched_from is not None and fetched_from != "same-origin":
        raise ApiError(
            403,
            "cross_site_continue",
            f"a continue is posted by the service's own page, not from a {fetched_from[:20]!r} "
            "one: open the warning's link",
        )
    limits = replace(state.limits, max_body=min(state.limits.max_body, MAX_CONFIRM_BODY))
    body = await _read_body(request, limits)
    url = _decoded_url(_form_field(body, "url"), "the form's url")
    token = _form_field(body, "token")
    engine, who, _decided = await _warning(request, state, url)
    if not _confirmed(state.continue_key, who, url, token):
        raise ApiError(
            403,
            "unconfirmed_continue",
            "the confirmation is missing, expired or was given to another client or URL: "
            "open the warning's link again",
        )
    try:
        site, _canonical = await run_in_threadpool(engine.grant, url, who)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url[:200]!r}") from None
    except StoreError as exc:
        raise ApiError(503, "warn_store_unavailable", str(exc)) from None
    state.metrics.count_policy([("-", "-", "continue")])
    return Response(
        status_code=303,
        # The URL as asked (port and path kept): printable ASCII, checked above.
        headers={"location": url, "x-urlsieve-granted": site, "cache-control": "no-store"},
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


SeenResult = bool | dict[str, Any]


def _seen_batch(store: SeenStore, op: str, urls: list[str]) -> list[SeenResult]:
    """One flag per URL, or an error in place of a URL the store's profile rejects."""
    out: list[SeenResult] = []
    valid: list[int] = []
    for index, url in enumerate(urls):
        try:
            canonical_bytes(url, store.profile)
        except InvalidURL as exc:
            out.append(invalid_url_json(url, exc))
        else:
            out.append(False)
            valid.append(index)
    batch = [urls[i] for i in valid]
    flags = store.add_many(batch) if op == "add" else store.contains_many(batch)
    for index, flag in zip(valid, flags, strict=True):
        out[index] = flag
    return out


async def seen(request: Request) -> Response:
    state = _state(request)
    data = await _json_body(request, state.limits)
    if state.seen is None:
        raise ApiError(404, "no_seen_store", "no seen store is configured (service.seen_store)")
    op = _seen_op(data)
    urls = _url_list(data)
    try:
        results = await run_in_threadpool(_seen_batch, state.seen, op, urls)
    except InvalidURL as exc:  # a backend stricter than its profile: the batch is refused
        raise ApiError(422, "invalid_url", f"{exc.reason}: {exc.url!r}") from None
    except StoreError as exc:
        raise ApiError(503, "store_unavailable", str(exc)) from None
    state.metrics.count_seen(op, (r for r in results if isinstance(r, bool)))
    key = "new" if op == "add" else "seen"
    return await _off_loop(_chars(urls), JSONResponse, {"op": op, key: results})


async def metrics(request: Request) -> Response:
    state = _state(request)
    live = state.rules
    try:
        loaded = live.get()
        current: Filter | None = _filter_of(loaded)
    except NoRules:
        current = None
    info = rules_info(current, live.loaded_at, live.generation)
    reloads = {"ok": live.reloads, "failed": live.failed_reloads}
    text = state.metrics.render(info, reloads)
    if state.unknown is not None:
        text += _unknown_metrics(state.unknown)
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


def _unknown_metrics(feed: UnknownFeed) -> str:
    """What the learning hook did: unknown URLs seen, handed to the queue, dropped."""
    stats = feed.stats
    return (
        "# HELP urlsieve_unknown_total Unknown URLs by what became of them (learning on)\n"
        "# TYPE urlsieve_unknown_total counter\n"
        f'urlsieve_unknown_total{{outcome="seen"}} {stats.seen}\n'
        f'urlsieve_unknown_total{{outcome="queued"}} {stats.delivered}\n'
        f'urlsieve_unknown_total{{outcome="dropped"}} {stats.dropped}\n'
        "# HELP urlsieve_unknown_queue_errors_total Calls to the learning queue that failed\n"
        "# TYPE urlsieve_unknown_queue_errors_total counter\n"
        f"urlsieve_unknown_queue_errors_total {stats.sink_errors}\n"
    )


async def healthz(request: Request) -> Response:
    state = _state(request)
    live = state.rules
    try:
        loaded = live.get()
    except NoRules as exc:
        return JSONResponse({"status": "no_rules", "detail": str(exc)}, status_code=503)
    current = _filter_of(loaded)
    body = {"status": "ok", "rules": rules_info(current, live.loaded_at, live.generation)}
    if live.error:
        body["last_reload_error"] = live.error
    return JSONResponse(body)


def _authorize(request: Request, token: str) -> None:
    """The request carries ``Authorization: Bearer <token>`` (compared in constant time),
    else :class:`ApiError` 401."""
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode()):
        raise ApiError(401, "unauthorized", "wrong token")


async def reload(request: Request) -> Response:
    state = _state(request)
    if state.token is None:
        raise ApiError(
            403, "reload_disabled", "reload is disabled: set service.token or service.token_file"
        )
    _authorize(request, state.token)
    reloader = state.reloader
    ok = await (reloader.reload() if reloader else run_in_threadpool(state.rules.reload))
    if not ok:
        raise ApiError(
            409, "reload_failed", f"the previous rules stay in force: {state.rules.error}"
        )
    current = _rules(state)
    return JSONResponse(
        {
            "reloaded": True,
            "rules": rules_info(current, state.rules.loaded_at, state.rules.generation),
        }
    )


# -- learned verdicts: review and override (token) ---------------------------------------


def _learn_admin(request: Request) -> tuple[ServiceState, LearnReview]:
    """The learner's admin, for an authorised caller: 404 when the service has no learner
    or no token (the endpoints do not exist then), 401 without the right token."""
    state = _state(request)
    if state.learn is None or state.token is None:
        missing = "[learn] with learn.directory" if state.learn is None else "service.token"
        raise ApiError(404, "learn_disabled", f"the learn endpoints are off: configure {missing}")
    _authorize(request, state.token)
    return state, state.learn


def _one_query(request: Request, name: str) -> str | None:
    """The one ``?name=`` value (UTF-8), None when absent; 400 when repeated or not UTF-8."""
    values = _query_values(request.scope.get("query_string", b""), name.encode())
    if len(values) > 1:
        raise ApiError(400, "repeated_field", f"?{name}= is given {len(values)} times")
    if not values:
        return None
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(
            400, "invalid_query", f"?{name}= is not UTF-8 once percent-decoded"
        ) from None


def _choice(request: Request, name: str, choices: tuple[str, ...]) -> str | None:
    value = _one_query(request, name)
    if value in (None, ""):
        return None
    if value not in choices:
        raise ApiError(
            400,
            "invalid_query",
            f"?{name}= must be one of {', '.join(choices)}, not {value[:40]!r}",
        )
    return value


def _count_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    """``?name=``: decimal digits from ``low`` to ``high`` (``default`` when absent)."""
    value = _one_query(request, name)
    if value is None or value == "":
        return default
    if not (value.isascii() and value.isdigit() and len(value) <= len(str(high))) or not (
        low <= int(value) <= high
    ):
        raise ApiError(
            400,
            "invalid_query",
            f"?{name}= must be an integer from {low} to {high}, not {value[:40]!r}",
        )
    return int(value)


def _learn_fields(data: dict[str, Any], op: str) -> dict[str, str]:
    """The body's fields for ``op``: strings, ``url`` required, no other key (a typo such
    as ``"catgory"`` would otherwise block under the default category)."""
    allowed = _LEARN_FIELDS[op]
    extra = [k for k in data if k not in allowed]
    if extra:
        raise ApiError(
            400,
            "invalid_body",
            f"unknown field {extra[0][:40]!r} for {op} (it takes {', '.join(allowed)})",
        )
    if "url" not in data:
        raise ApiError(400, "invalid_body", 'the body has no "url": send {"url": "http://…"}')
    for name, value in data.items():
        if not isinstance(value, str):
            raise ApiError(400, "invalid_body", f'"{name}" must be a string, not {_kind(value)}')
    return dict(data)


def _refused(exc: ValueError) -> ApiError:
    """An input the learner refuses (422), saying why."""
    code = "invalid_url" if isinstance(exc, InvalidURL) else "invalid_override"
    return ApiError(422, code, str(exc)[:1000])


def _unavailable(exc: LearnError) -> ApiError:
    return ApiError(503, "learn_unavailable", str(exc)[:1000])


async def _learn_call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread (the learner reads and writes files), its errors
    as API errors."""
    try:
        return await run_in_threadpool(fn, *args)
    except LearnError as exc:
        raise _unavailable(exc) from None
    except ValueError as exc:
        raise _refused(exc) from None


def _enforced(state: ServiceState, url: str) -> dict[str, Any] | None:
    """This service's verdict for ``url`` now (a bare host name: its front page), or None
    when it has no rules or the URL does not parse."""
    try:
        rules = _rules(state)
        target = url if "://" in url or "/" in url else f"http://{url}/"
        return verdict_json(url, rules.check(target))
    except (ApiError, InvalidURL, ValueError):
        return None


async def _after_write(state: ServiceState, url: str, action: str | None) -> dict[str, Any]:
    """Load the rebuilt overlay now (a file-change check, not a full reload: the base
    rules are not read again), then say what this service does with ``url``."""
    if state.reloader is not None:
        await state.reloader.poll()
    out: dict[str, Any] = {"rules_generation": state.rules.generation}
    enforced = await run_in_threadpool(_enforced, state, url)
    out["gateway"] = enforced
    if action is not None and enforced is not None and enforced["action"] != action:
        rule = enforced["rule"]
        out["warning"] = (
            f"this service's rules {enforced['action']} it"
            + (f" ({rule['source']}:{rule['line']})" if rule and rule.get("source") else "")
            + ": the administrator's lists win over learned rules and overrides (change the "
            "lists instead), and learned rules apply only where learn.overlay is loaded"
        )
    return out


async def learn_verdicts(request: Request) -> Response:
    """``GET /v1/learn/verdicts``: a page of learned verdicts (by host, then rule)."""
    _, admin = _learn_admin(request)
    source = _choice(request, "source", SOURCES)
    action = _choice(request, "action", ACTIONS)
    limit = _count_param(request, "limit", LEARN_PAGE, 1, MAX_LEARN_PAGE)
    offset = _count_param(request, "offset", 0, 0, MAX_LEARN_OFFSET)
    page = await _learn_call(admin.list, source, action, limit + 1, offset)
    more = len(page) > limit
    return JSONResponse(
        {
            "verdicts": page[:limit],
            "offset": offset,
            "limit": limit,
            "next_offset": offset + limit if more else None,
        }
    )


async def learn_verdict(request: Request) -> Response:
    """``GET /v1/learn/verdict?url=``: what was learned about one URL, and why."""
    _, admin = _learn_admin(request)
    url = _url_param(request)
    found = await _learn_call(admin.show, url)
    if found is None:
        raise ApiError(404, "not_learned", f"nothing is learned about {url[:200]!r}")
    return JSONResponse(found)


async def _override(request: Request, action: str) -> Response:
    state, admin = _learn_admin(request)
    fields = _learn_fields(await _json_body(request, state.limits), action)
    url = fields["url"]
    category = fields.get("category") if action == "block" else None
    done = await _learn_call(admin.override, url, action, category, fields.get("note", ""))
    return JSONResponse({**done, **(await _after_write(state, url, action))})


async def learn_allow(request: Request) -> Response:
    """``POST /v1/learn/allow``: allow a URL (a bare host: the whole host) whatever is
    learned."""
    return await _override(request, "allow")


async def learn_block(request: Request) -> Response:
    """``POST /v1/learn/block``: block a URL (a bare host: the whole host) under a
    category (``blocked`` by default) whatever is learned."""
    return await _override(request, "block")


async def learn_forget(request: Request) -> Response:
    """``POST /v1/learn/forget``: drop the verdict (learned or override) for a URL's rule;
    ``"forgotten": false`` when there was none."""
    state, admin = _learn_admin(request)
    url = _learn_fields(await _json_body(request, state.limits), "forget")["url"]
    gone = await _learn_call(admin.forget, url)
    return JSONResponse({"url": url, "forgotten": gone, **(await _after_write(state, url, None))})


async def openapi(request: Request) -> Response:
    """The OpenAPI document of what this service serves (the learn endpoints only when
    they are on)."""
    state = _state(request)
    paths = dict(OPENAPI["paths"])
    if state.learn is not None and state.token is not None:
        paths.update(LEARN_PATHS)
    if state.console is not None:  # the block pages and the console (HTML)
        paths.update(state.console.openapi_paths())
    return JSONResponse({**OPENAPI, "paths": paths})


class _Timing:
    """ASGI middleware: count and time every request by route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            path = scope.get("path", "")
            endpoint = path if path in _ENDPOINTS else "other"
            state = getattr(scope["app"].state, "urlsieve", None) if "app" in scope else None
            if state is not None:
                state.metrics.observe_request(
                    endpoint, scope.get("method", "-"), status, time.perf_counter() - started
                )


class _OneFraming:
    """ASGI middleware: a request whose headers frame it two ways (both
    ``Transfer-Encoding`` and ``Content-Length``, two lengths, two hosts) is answered 400
    and its connection closed before any handler runs. ``urlsieve serve`` refuses such a
    request as it arrives; this is for the application under any other server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = framing_problem(scope.get("http_version", "1.1"), scope.get("headers", ()))
            if problem is not None:
                response = _error(400, "ambiguous_framing", problem, close=True)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _wrap(handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.detail, close=exc.close)

    endpoint.__name__ = handler.__name__
    endpoint.__doc__ = handler.__doc__
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))
    return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")


_ROUTES = [
    ("/v1/check", check_one, ["GET"]),
    ("/v1/check", check_batch, ["POST"]),
    ("/v1/explain", explain, ["GET"]),
    ("/v1/continue", continue_page, ["GET"]),
    ("/v1/continue", continue_warned, ["POST"]),
    ("/v1/pending", pending, ["GET"]),
    ("/v1/seen", seen, ["POST"]),
    ("/v1/reload", reload, ["POST"]),
    ("/v1/learn/verdicts", learn_verdicts, ["GET"]),
    ("/v1/learn/verdict", learn_verdict, ["GET"]),
    ("/v1/learn/allow", learn_allow, ["POST"]),
    ("/v1/learn/block", learn_block, ["POST"]),
    ("/v1/learn/forget", learn_forget, ["POST"]),
    ("/metrics", metrics, ["GET"]),
    ("/healthz", healthz, ["GET"]),
    ("/openapi.json", openapi, ["GET"]),
]
_ENDPOINTS = frozenset(path for path, _, _ in _ROUTES)


@asynccontextmanager
async def _sighup(reloader: Reloader, enabled: bool) -> AsyncIterator[None]:
    """While inside: SIGHUP asks ``reloader`` for a reload (main thread, Unix only)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.request)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


def create_app(
    config: GatewayConfig,
    *,
    load: Callable[[], Filter] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    limits: ServiceLimits | None = None,
    reload_on_sighup: bool = False,
    unknown: UnknownFeed | None = None,
    learn: LearnReview | None = None,
    burst: BurstGate | None = None,
) -> Starlette:
    """The service for ``config``; ``load`` replaces the configured rule loader (tests).

    ``reload_on_sighup``: reload the rules on SIGHUP while the app runs (``urlsieve
    serve`` sets it; the handler is installed by the lifespan, in the main thread only).
    ``unknown``: where URLs no rule decides go for learning (``urlsieve serve`` wires the
    learner's queue when ``learn.queue`` is set; the service never imports the learner).
    ``burst``: the cap on requests of an unknown site (``learn.burst``; ``urlsieve serve``
    wires it with the queue). ``learn``: the learned verdicts for ``/v1/learn/*``
    (``urlsieve serve`` wires it when the config has the learner's ``[learn]`` section;
    on only with a token too). The caller owns it (and closes it).
    """
    loader: Callable[[], Any] = load or policy_loader(config) or filter_loader(config, log)
    token = config.read_token()
    trusted = AddressSet.of(parse_address(a) for a in config.trusted_proxies)
    caps = limits or ServiceLimits()
    console = _console(config, token, learn, log)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        notify = [] if load is not None else rules_notify(config)
        rules = await run_in_threadpool(
            lambda: LiveRules(
                loader,
                watch=rules_watch(config),
                # the reloader paces the checks; with a change counter it reads the counter
                # every NOTICE_SECONDS and the files every reload_check_seconds
                check_seconds=config.reload_check_seconds if notify else 0,
                log=log,
                notify=notify,
            )
        )
        store = None
        if config.seen_store:
            try:
                store = open_seen(config.seen_store)
            except (StoreError, ConfigError) as exc:
                raise ConfigError(f"service.seen_store {config.seen_store!r}: {exc}") from exc
        pace = config.reload_check_seconds
        reloader = Reloader(rules, min(pace, NOTICE_SECONDS) if notify else pace, log)
        app.state.urlsieve = ServiceState(
            rules,
            Metrics(),
            store,
            token,
            caps,
            reloader,
            trusted,
            config.client_header,
            config.user_header,
            unknown,
            config.unknown_policy == "block",
            burst,
            config.pending,
            learn,
            continue_key(token),
        )
        state = app.state.urlsieve
        state.console = console
        if config.decision_log:
            from urlsieve.console.stream import DecisionWriter

            state.decisions = DecisionWriter(config.decision_log, log=log)
        try:
            async with anyio.create_task_group() as tasks, _sighup(reloader, reload_on_sighup):
                tasks.start_soon(reloader.run)
                if console is not None:
                    tasks.start_soon(console.run, state)
                yield
                tasks.cancel_scope.cancel()
        finally:
            if store is not None:
                store.close()
            if state.decisions is not None:
                state.decisions.close()
            if console is not None:
                console.close()

    routes = [Route(path, _wrap(fn), methods=methods) for path, fn, methods in _ROUTES]
    if console is not None:
        routes += console.routes()
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _http_error},
    )
    app.add_middleware(_Timing)
    app.add_middleware(_OneFraming)
    return app


def _console(
    config: GatewayConfig,
    token: str | None,
    learn: LearnReview | None,
    log: Callable[[str], None],
) -> Any:
    """The block pages and the console (:mod:`urlsieve.console.web`), or None without
    Jinja2 (the ``service`` extra installs it)."""
    try:
        from urlsieve.console.web import Console
    except ImportError as exc:
        log(f"the block pages and the console are off: {exc} (pip install 'urlsieve[service]')")
        return None
    return Console(config, token, learn, log)


def _param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _error_responses(*codes: int) -> dict[str, Any]:
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {str(code): {"description": "error", **ref} for code in codes}


def _json(schema_ref: str, description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}}},
    }


_URLS_BODY = {
    "required": True,
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UrlBatch"}}},
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "urlsieve lookup service",
        "version": __version__,
        "description": "URL filtering verdicts, explanations and URL de-duplication.",
    },
    "paths": {
        "/v1/check": {
            "get": {
                "summary": "Verdict for one URL",
                "parameters": [_param("url", "the URL to check")],
                "responses": {
                    "200": _json("Verdict", "the verdict"),
                    **_error_responses(400, 422, 503),
                },
            },
            "post": {
                "summary": "Verdicts for a batch of URLs",
                "requestBody": _URLS_BODY,
                "responses": {
                    "200": _json("VerdictBatch", "one result per URL, in order"),
                    **_error_responses(400, 408, 413, 503),
                },
            },
        },
        "/v1/explain": {
            "get": {
                "summary": "Why a URL gets its verdict",
                "parameters": [_param("url", "the URL to explain")],
                "responses": {
                    "200": _json("Explanation", "canonical form, probes, deciding rule"),
                    **_error_responses(400, 422, 503),
                },
            }
        },
        "/v1/continue": {
            "get": {
                "summary": "The confirmation page of a policy warning (?category), which the "
                "warning page links to; it grants nothing",
                "parameters": [_param("url", "the URL the warning page was shown for")],
                "responses": {
                    "200": {
                        "description": "an HTML page whose form posts the URL and a token "
                        "tied to this client and URL (good for 10 minutes)",
                        "content": {"text/html": {}},
                    },
                    **_error_responses(400, 403, 404, 409, 422, 503),
                },
            },
            "post": {
                "summary": "Continue past a policy warning: the client is let through to the "
                "URL's site for the policy's warn_minutes",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "required": ["url", "token"],
                                "properties": {
                                    "url": {"type": "string"},
                                    "token": {"type": "string"},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "303": {"description": "granted; Location is the URL as given"},
                    **_error_responses(400, 403, 404, 408, 409, 413, 422, 503),
                },
            },
        },
        "/v1/pending": {
            "get": {
                "summary": "The checking page of a URL of an unknown site past its burst "
                "(learn.pending = 'check'): it reloads itself until the URL has a verdict",
                "parameters": [_param("url", "the URL the gateway answered pending")],
                "responses": {
                    "200": {
                        "description": "an HTML page: checking (reloads every second), "
                        "allowed (refreshes to the URL) or blocked",
                        "content": {"text/html": {}},
                    },
                    **_error_responses(400, 422, 503),
                },
            }
        },
        "/v1/seen": {
            "post": {
                "summary": "Add URLs to, or test them against, the seen store",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/SeenOp"}}
                    },
                },
                "responses": {
                    "200": _json("SeenResult", "one flag (or error) per URL, in order"),
                    **_error_responses(400, 404, 408, 413, 503),
                },
            }
        },
        "/v1/reload": {
            "post": {
                "summary": "Reload the rules (snapshot or lists)",
                "security": [{"bearer": []}],
                "responses": {
                    "200": {"description": "reloaded"},
                    **_error_responses(401, 403, 409),
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {"description": "text format 0.0.4", "content": {"text/plain": {}}}
                },
            }
        },
        "/healthz": {
            "get": {
                "summary": "Health: rules loaded or not",
                "responses": {"200": {"description": "ok"}, "503": {"description": "no rules"}},
            }
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error", "detail"],
                "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
            },
            "Rule": {
                "type": ["object", "null"],
                "properties": {
                    "pattern": {"type": "string"},
                    "action": {"enum": ["block", "allow"]},
                    "category": {"type": "string"},
                    "source": {"type": ["string", "null"]},
                    "line": {"type": ["integer", "null"]},
                },
            },
            "Verdict": {
                "type": "object",
                "properties": {
                    "url": {"type": "string"},
                    "action": {"enum": ["block", "allow", "none"]},
                    "category": {"type": ["string", "null"]},
                    "canonical": {"type": "string"},
                    "rule": {"$ref": "#/components/schemas/Rule"},
                    "error": {"type": "string", "description": "set instead, in a batch"},
                    "detail": {"type": "string"},
                },
            },
            "VerdictBatch": {
                "type": "object",
                "properties": {
                    "results": {"type": "array", "items": {"$ref": "#/components/schemas/Verdict"}}
                },
            },
            "UrlBatch": {
                "type": "object",
                "required": ["urls"],
                "properties": {
                    "urls": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_BATCH}
                },
            },
            "Explanation": {
                "type": "object",
                "properties": {
                    "url": {"type": "string"},
                    "canonical": {"type": "string"},
                    "action": {"enum": ["block", "allow", "none"]},
                    "category": {"type": ["string", "null"]},
                    "matching": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "every enforced category with a rule matching the URL "
                        "(category: the one that decides)",
                    },
                    "probes": {"type": "array", "items": {"type": "string"}},
                    "rule": {"$ref": "#/components/schemas/Rule"},
                },
            },
            "SeenOp": {
                "type": "object",
                "required": ["op", "urls"],
                "properties": {
                    "op": {"enum": ["add", "test"]},
                    "urls": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_BATCH},
                },
            },
            "SeenFlag": {
                "oneOf": [
                    {"type": "boolean"},
                    {
                        "type": "object",
                        "description": "in place of a URL the store's profile rejects",
                        "properties": {
                            "url": {"type": "string"},
                            "error": {"type": "string"},
                            "detail": {"type": "string"},
                        },
                    },
                ]
            },
            "SeenResult": {
                "type": "object",
                "properties": {
                    "op": {"enum": ["add", "test"]},
                    "new": {"type": "array", "items": {"$ref": "#/components/schemas/SeenFlag"}},
                    "seen": {"type": "array", "items": {"$ref": "#/components/schemas/SeenFlag"}},
                },
            },
        },
    },
}


def _learn_body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": required,
                    "properties": properties,
                }
            }
        },
    }


_LEARN_URL = {
    "type": "string",
    "maxLength": 8192,
    "description": "a URL, or a host name for the whole host",
}
_LEARN_NOTE = {"type": "string", "maxLength": 1000, "description": "why (kept with it)"}
_LEARN_SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]

#: The ``/v1/learn/*`` paths, in the document when the learn endpoints are on.
LEARN_PATHS: dict[str, Any] = {
    "/v1/learn/verdicts": {
        "get": {
            "summary": "A page of learned verdicts (by host, then rule)",
            "security": _LEARN_SECURITY,
            "parameters": [
                {"name": "source", "in": "query", "schema": {"enum": list(SOURCES)}},
                {"name": "action", "in": "query", "schema": {"enum": list(ACTIONS)}},
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LEARN_PAGE},
                },
                {
                    "name": "offset",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_LEARN_OFFSET},
                },
            ],
            "responses": {
                "200": _json("LearnedPage", "the verdicts; next_offset is null on the last page"),
                **_error_responses(400, 401, 404, 503),
            },
        }
    },
    "/v1/learn/verdict": {
        "get": {
            "summary": "What was learned about a URL (its page's rule, else its host's)",
            "security": _LEARN_SECURITY,
            "parameters": [_param("url", "the URL (or host name)")],
            "responses": {
                "200": _json("Learned", "the verdict and its evidence"),
                **_error_responses(400, 401, 404, 422, 503),
            },
        }
    },
    "/v1/learn/allow": {
        "post": {
            "summary": "Allow a URL (or a whole host) whatever is learned",
            "security": _LEARN_SECURITY,
            "requestBody": _learn_body(["url"], {"url": _LEARN_URL, "note": _LEARN_NOTE}),
            "responses": {
                "200": _json("Override", "stored, overlay rebuilt and loaded"),
                **_error_responses(400, 401, 404, 408, 413, 422, 503),
            },
        }
    },
    "/v1/learn/block": {
        "post": {
            "summary": "Block a URL (or a whole host) whatever is learned",
            "security": _LEARN_SECURITY,
            "requestBody": _learn_body(
                ["url"],
                {
                    "url": _LEARN_URL,
                    "category": {
                        "type": "string",
                        "maxLength": 60,
                        "default": "blocked",
                        "description": "one directory name: no '/', '\\', blank, leading '.'",
                    },
                    "note": _LEARN_NOTE,
                },
            ),
            "responses": {
                "200": _json("Override", "stored, overlay rebuilt and loaded"),
                **_error_responses(400, 401, 404, 408, 413, 422, 503),
            },
        }
    },
    "/v1/learn/forget": {
        "post": {
            "summary": "Drop what was learned (or overridden) for a URL's rule",
            "security": _LEARN_SECURITY,
            "requestBody": _learn_body(["url"], {"url": _LEARN_URL}),
            "responses": {
                "200": {"description": '{"url", "forgotten": bool, "gateway", …}'},
                **_error_responses(400, 401, 404, 408, 413, 422, 503),
            },
        }
    },
}

_LEARNED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "the rule: host/path?query, or a host"},
        "host": {"type": "string"},
        "is_host": {"type": "boolean"},
        "action": {"enum": list(ACTIONS)},
        "category": {"type": "string"},
        "source": {"enum": list(SOURCES)},
        "score": {"type": "integer"},
        "evidence": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "phrase": {"type": "string"},
                    "weight": {"type": "integer"},
                    "count": {"type": "integer"},
                },
            },
        },
        "url": {"type": "string"},
        "final_url": {"type": ["string", "null"]},
        "content_hash": {"type": ["string", "null"]},
        "fetched_at": {"type": ["number", "null"]},
        "first_seen": {"type": ["number", "null"]},
        "decided_at": {"type": "number"},
        "note": {"type": "string"},
    },
}
OPENAPI["components"]["schemas"].update(
    {
        "Learned": _LEARNED_SCHEMA,
        "LearnedPage": {
            "type": "object",
            "properties": {
                "verdicts": {"type": "array", "items": {"$ref": "#/components/schemas/Learned"}},
                "offset": {"type": "integer"},
                "limit": {"type": "integer"},
                "next_offset": {"type": ["integer", "null"]},
            },
        },
        "Override": {
            "allOf": [
                {"$ref": "#/components/schemas/Learned"},
                {
                    "type": "object",
                    "properties": {
                        "overlay_rules": {"type": "integer"},
                        "overlay_seconds": {"type": "number"},
                        "rules_generation": {"type": "integer"},
                        "gateway": {
                            "description": "this service's verdict for the URL now",
                            "oneOf": [{"$ref": "#/components/schemas/Verdict"}, {"type": "null"}],
                        },
                        "warning": {
                            "type": "string",
                            "description": "set when this service's rules decide otherwise",
                        },
                    },
                },
            ]
        },
    }
)
