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

This module is the server: :func:`create_app` (its lifespan builds the state), the ASGI
middlewares, and the names other modules import from here. The endpoints live by job in
:mod:`urlsieve.service`: ``check`` (verdicts, explain), ``pages`` (continue past a
warning, the pending page), ``seen``, ``learn`` (review and override), ``ops`` (metrics,
health, reload); ``reading`` reads requests, ``state`` holds what they share, and
``openapi`` makes the routes and the OpenAPI document from one list of declarations.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from urlsieve.config import open_seen_store, rules_loader, rules_notify, rules_watch
from urlsieve.filter import Filter
from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.headers import framing_problem
from urlsieve.gateway.learning import LearnReview
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.metrics import Metrics
from urlsieve.gateway.unknown import BurstGate, UnknownFeed
from urlsieve.policy.clients import AddressSet, parse_address
from urlsieve.service import check as checks
from urlsieve.service import learn as learning
from urlsieve.service import ops as running
from urlsieve.service import pages as browser_pages
from urlsieve.service import seen as seen_store
from urlsieve.service.check import (
    _check_batch,
    _count,
    _count_policy,
    _learn,
    _stream,
    _within_burst,
    check_batch,
    check_one,
    decision_json,
    explain,
    explanation_json,
    invalid_url_json,
    rule_json,
    verdict_json,
)
from urlsieve.service.errors import ApiError, _error, _http_error, _wrap
from urlsieve.service.learn import (
    LEARN_PAGE,
    MAX_LEARN_OFFSET,
    MAX_LEARN_PAGE,
    _after_write,
    _enforced,
    _learn_admin,
    _learn_call,
    _learn_fields,
    learn_allow,
    learn_block,
    learn_forget,
    learn_verdict,
    learn_verdicts,
)
from urlsieve.service.openapi import Api, Endpoint, paths_of
from urlsieve.service.ops import healthz, metrics, reload
from urlsieve.service.pages import (
    CONFIRM_SECONDS,
    MAX_CONFIRM_BODY,
    _confirmation_page,
    _confirmed,
    _http_url,
    _warning,
    confirmation,
    continue_key,
    continue_page,
    continue_warned,
    pending,
)
from urlsieve.service.reading import (
    INLINE_BATCH,
    INLINE_CHARS,
    MAX_BATCH,
    MAX_NUMBER_DIGITS,
    _authorize,
    _chars,
    _choice,
    _count_param,
    _decoded_url,
    _form_field,
    _json_body,
    _kind,
    _off_loop,
    _one_query,
    _parse_json,
    _peer,
    _query_values,
    _read_body,
    _url_list,
    _url_param,
    _who,
)
from urlsieve.service.seen import SeenResult, _seen_batch, _seen_op, seen
from urlsieve.service.state import (
    MIN_CHECK_SECONDS,
    NOTICE_SECONDS,
    Reloader,
    ServiceLimits,
    ServiceState,
    _filter_of,
    _loaded,
    _rules,
    _state,
)

__all__ = ["MAX_BATCH", "ServiceLimits", "ServiceState", "create_app"]

# What moved to urlsieve.service and may still be imported from here (tests, and
# code written against this module before the split).
_MOVED = (
    ApiError, CONFIRM_SECONDS, INLINE_BATCH, INLINE_CHARS, LEARN_PAGE, MAX_CONFIRM_BODY,
    MAX_LEARN_OFFSET, MAX_LEARN_PAGE, MAX_NUMBER_DIGITS, MIN_CHECK_SECONDS, SeenResult,
    _after_write, _authorize, _chars, _check_batch, _choice, _confirmation_page, _confirmed,
    _count, _count_param, _count_policy, _decoded_url, _enforced, _filter_of, _form_field,
    _http_url, _json_body, _kind, _learn, _learn_admin, _learn_call, _learn_fields, _loaded,
    _off_loop, _one_query, _parse_json, _peer, _query_values, _read_body, _rules, _seen_batch,
    _seen_op, _state, _stream, _url_list, _url_param, _warning, _who, _within_burst, _wrap,
    check_batch, check_one, confirmation, continue_page, continue_warned, decision_json,
    explain, explanation_json, healthz, invalid_url_json, learn_allow, learn_block,
    learn_forget, learn_verdict, learn_verdicts, metrics, pending, reload, rule_json, seen,
    verdict_json,
)  # fmt: skip

#: The service's endpoints, in the order of its routes (the console's pages come after).
ENDPOINTS: tuple[Endpoint, ...] = (
    *checks.API,
    *browser_pages.API,
    *seen_store.API,
    *learning.API,
    *running.API,
)
_ENDPOINTS = Api(ENDPOINTS).paths()
#: The document without the learn endpoints and the console's pages, and the learn paths.
OPENAPI: dict[str, Any] = Api(ENDPOINTS).document(None)
LEARN_PATHS: dict[str, Any] = paths_of(learning.API)


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
    loader: Callable[[], Any] = load or rules_loader(config, log)
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
        store = open_seen_store(config)
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

    routes = Api([*ENDPOINTS, *(console.endpoints() if console is not None else ())]).routes()
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
    """The block pages and the console (:mod:`urlsieve.service.console`), or None without
    Jinja2 (the ``service`` extra installs it)."""
    try:
        from urlsieve.service.console import Console
    except ImportError as exc:
        log(f"the block pages and the console are off: {exc} (pip install 'urlsieve[service]')")
        return None
    return Console(config, token, learn, log)
