"""Running the service: ``GET /metrics`` (Prometheus), ``GET /healthz`` and ``POST
/v1/reload`` (the service token)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from urlsieve.filter import Filter
from urlsieve.gateway.live import NoRules
from urlsieve.gateway.metrics import CONTENT_TYPE
from urlsieve.gateway.ruleset import rules_info
from urlsieve.gateway.unknown import UnknownFeed
from urlsieve.service.errors import ApiError
from urlsieve.service.openapi import Endpoints, errors
from urlsieve.service.reading import _authorize
from urlsieve.service.state import _filter_of, _rules, _state

API = Endpoints()


@API.get(
    "/metrics",
    "Prometheus metrics",
    responses={"200": {"description": "text format 0.0.4", "content": {"text/plain": {}}}},
)
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


@API.get(
    "/healthz",
    "Health: rules loaded or not",
    responses={"200": {"description": "ok"}, "503": {"description": "no rules"}},
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


@API.post(
    "/v1/reload",
    "Reload the rules (snapshot or lists)",
    token=True,
    responses={"200": {"description": "reloaded"}, **errors(401, 403, 409)},
)
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
