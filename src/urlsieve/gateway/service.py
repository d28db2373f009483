"""The HTTP lookup service (Starlette; run it with ``urlsieve serve`` on uvicorn).

Endpoints (the OpenAPI document is served at ``/openapi.json``):

=====================  ==============================================================
``GET /v1/check``      ``?url=``: the verdict for one URL
``POST /v1/check``     ``{"urls": [...]}``: verdicts for a batch (at most 10,000)
``GET /v1/explain``    ``?url=``: canonical form, expressions probed, deciding rule
``POST /v1/seen``      ``{"op": "add"|"test", "urls": [...]}`` on the configured seen store
``GET /metrics``       Prometheus text: requests, decisions, latency, snapshot version/age
``GET /healthz``       200 when rules are loaded, 503 (with the reason) when not
``POST /v1/reload``    reload the rules; ``Authorization: Bearer <token>``
=====================  ==============================================================

Every error is a JSON body ``{"error": code, "detail": text}`` with a 4xx status
for a bad request (a 5xx only for the server's own state, e.g. no rules loaded).
The rules and the seen store are created in the lifespan, not at import.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from urlsieve import __version__
from urlsieve.exceptions import ConfigError, InvalidURL, StoreError
from urlsieve.filter import Filter
from urlsieve.gateway.config import GatewayConfig
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.metrics import CONTENT_TYPE, Metrics
from urlsieve.gateway.rules import filter_loader, rules_info
from urlsieve.match.base import Explanation, Verdict
from urlsieve.rules.model import Rule
from urlsieve.seen import SeenStore, open_seen

__all__ = ["MAX_BATCH", "ServiceState", "create_app"]

MAX_BATCH = 10_000
#: Batches larger than this are checked in a worker thread, not on the event loop.
INLINE_BATCH = 256
MAX_BODY = 8 << 20


@dataclass
class ServiceState:
    """What the lifespan creates and the endpoints share."""

    rules: LiveRules[Filter]
    metrics: Metrics
    seen: SeenStore | None
    token: str | None


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        super().__init__(detail)


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


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
        "probes": list(explanation.probes),
        "rule": rule_json(explanation.rule),
    }


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.urlsieve
    return state


def _rules(state: ServiceState) -> Filter:
    state.rules.poll()
    try:
        return state.rules.get()
    except NoRules as exc:
        raise ApiError(503, "no_rules", str(exc)) from None


def _url_param(request: Request) -> str:
    url = request.query_params.get("url")
    if url is None or not url.strip():
        raise ApiError(400, "missing_url", "pass the URL to check as ?url=…")
    return url


async def _json_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise ApiError(413, "body_too_large", f"request body over {MAX_BODY} bytes")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    return data


def _url_list(data: dict[str, Any]) -> list[str]:
    urls = data.get("urls")
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ApiError(422, "invalid_body", 'expected {"urls": ["http://…", …]}')
    if len(urls) > MAX_BATCH:
        raise ApiError(413, "batch_too_large", f"{len(urls)} URLs: at most {MAX_BATCH} per batch")
    for index, url in enumerate(urls):
        if not url.isascii():
            try:
                url.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate from a JSON \udcXX escape
                raise ApiError(
                    422, "invalid_body", f"urls[{index}] is not valid Unicode (lone surrogate)"
                ) from None
    return urls


def _check_batch(rules: Filter, urls: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for url in urls:
        try:
            out.append(verdict_json(url, rules.check(url)))
        except InvalidURL as exc:
            out.append({"url": url, "error": "invalid_url", "detail": exc.reason})
    return out


def _count(state: ServiceState, results: list[dict[str, Any]]) -> None:
    state.metrics.count_decisions(
        (r["action"], r["category"] or "-") for r in results if "action" in r
    )


async def check_one(request: Request) -> Response:
    state = _state(request)
    url = _url_param(request)
    rules = _rules(state)
    try:
        result = verdict_json(url, rules.check(url))
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url!r}") from None
    _count(state, [result])
    return JSONResponse(result)


async def check_batch(request: Request) -> Response:
    state = _state(request)
    urls = _url_list(await _json_body(request))
    rules = _rules(state)
    if len(urls) > INLINE_BATCH:
        results = await run_in_threadpool(_check_batch, rules, urls)
    else:
        results = _check_batch(rules, urls)
    _count(state, results)
    return JSONResponse({"results": results})


async def explain(request: Request) -> Response:
    state = _state(request)
    url = _url_param(request)
    rules = _rules(state)
    try:
        explanation = rules.explain(url)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {url!r}") from None
    return JSONResponse(explanation_json(explanation))


async def seen(request: Request) -> Response:
    state = _state(request)
    data = await _json_body(request)
    if state.seen is None:
        raise ApiError(404, "no_seen_store", "no seen store is configured (service.seen_store)")
    op = data.get("op", "add")
    if op not in ("add", "test"):
        raise ApiError(422, "invalid_body", f'"op" must be "add" or "test", not {op!r}')
    urls = _url_list(data)
    store = state.seen
    try:
        if op == "add":
            flags = await run_in_threadpool(store.add_many, urls)
        else:
            flags = await run_in_threadpool(store.contains_many, urls)
    except InvalidURL as exc:
        raise ApiError(422, "invalid_url", f"{exc.reason}: {exc.url!r}") from None
    except StoreError as exc:
        raise ApiError(503, "store_unavailable", str(exc)) from None
    state.metrics.count_seen(op, flags)
    key = "new" if op == "add" else "seen"
    return JSONResponse({"op": op, key: flags})


async def metrics(request: Request) -> Response:
    state = _state(request)
    live = state.rules
    try:
        current: Filter | None = live.get()
    except NoRules:
        current = None
    info = rules_info(current, live.loaded_at, live.generation)
    return PlainTextResponse(state.metrics.render(info), media_type=CONTENT_TYPE)


async def healthz(request: Request) -> Response:
    state = _state(request)
    live = state.rules
    live.poll()
    try:
        current = live.get()
    except NoRules as exc:
        return JSONResponse({"status": "no_rules", "detail": str(exc)}, status_code=503)
    body = {"status": "ok", "rules": rules_info(current, live.loaded_at, live.generation)}
    if live.error:
        body["last_reload_error"] = live.error
    return JSONResponse(body)


async def reload(request: Request) -> Response:
    state = _state(request)
    if state.token is None:
        raise ApiError(
            403, "reload_disabled", "reload is disabled: set service.token or service.token_file"
        )
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    if not hmac.compare_digest(given.strip().encode(), state.token.encode()):
        raise ApiError(401, "unauthorized", "wrong token")
    ok = await run_in_threadpool(state.rules.reload)
    state.metrics.count_reload("ok" if ok else "failed")
    if not ok:
        raise ApiError(
            409, "reload_failed", f"the previous rules stay in force: {state.rules.error}"
        )
    current = state.rules.get()
    return JSONResponse(
        {
            "reloaded": True,
            "rules": rules_info(current, state.rules.loaded_at, state.rules.generation),
        }
    )


async def openapi(request: Request) -> Response:
    return JSONResponse(OPENAPI)


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


def _wrap(handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.detail)

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
    ("/v1/seen", seen, ["POST"]),
    ("/v1/reload", reload, ["POST"]),
    ("/metrics", metrics, ["GET"]),
    ("/healthz", healthz, ["GET"]),
    ("/openapi.json", openapi, ["GET"]),
]
_ENDPOINTS = frozenset(path for path, _, _ in _ROUTES)


def create_app(
    config: GatewayConfig,
    *,
    load: Callable[[], Filter] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Starlette:
    """The service for ``config``; ``load`` replaces the configured rule loader (tests)."""
    loader = load or filter_loader(config)
    token = config.read_token()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        rules = await run_in_threadpool(
            lambda: LiveRules(
                loader,
                watch=config.snapshot,
                check_seconds=config.reload_check_seconds,
                log=log,
            )
        )
        store = None
        if config.seen_store:
            try:
                store = open_seen(config.seen_store)
            except (StoreError, ConfigError) as exc:
                raise ConfigError(f"service.seen_store {config.seen_store!r}: {exc}") from exc
        app.state.urlsieve = ServiceState(rules, Metrics(), store, token)
        try:
            yield
        finally:
            if store is not None:
                store.close()

    routes = [Route(path, _wrap(fn), methods=methods) for path, fn, methods in _ROUTES]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _http_error},
    )
    app.add_middleware(_Timing)
    return app


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
                    **_error_responses(400, 413, 422, 503),
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
                    "200": _json("SeenResult", "one flag per URL"),
                    **_error_responses(400, 404, 413, 422, 503),
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
                    "probes": {"type": "array", "items": {"type": "string"}},
                    "rule": {"$ref": "#/components/schemas/Rule"},
                },
            },
            "SeenOp": {
                "type": "object",
                "required": ["urls"],
                "properties": {
                    "op": {"enum": ["add", "test"], "default": "add"},
                    "urls": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_BATCH},
                },
            },
            "SeenResult": {
                "type": "object",
                "properties": {
                    "op": {"enum": ["add", "test"]},
                    "new": {"type": "array", "items": {"type": "boolean"}},
                    "seen": {"type": "array", "items": {"type": "boolean"}},
                },
            },
        },
    },
}
