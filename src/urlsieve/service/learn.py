"""The learned verdicts, reviewed and overridden (``/v1/learn/*``, the service token):
on with a learner (``[learn]`` with ``learn.directory``, wired by ``urlsieve serve``) and
a token, else 404 and out of the document. A write rebuilds the overlay snapshot and
reloads it into this service before it answers; overrides survive re-learning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from urlsieve.exceptions import InvalidURL, LearnError
from urlsieve.gateway.learning import ACTIONS, SOURCES, LearnReview
from urlsieve.service.check import verdict_json
from urlsieve.service.errors import ApiError
from urlsieve.service.openapi import Endpoints, Param, errors, json_body, json_ok, url_param
from urlsieve.service.reading import (
    _authorize,
    _choice,
    _count_param,
    _json_body,
    _kind,
    _url_param,
)
from urlsieve.service.state import ServiceState, _rules, _state

T = TypeVar("T")

API = Endpoints()

#: ``GET /v1/learn/verdicts``: the default and the largest page, and the largest offset.
LEARN_PAGE = 100
MAX_LEARN_PAGE = 1000
MAX_LEARN_OFFSET = 10**9
#: The fields a learn write body may hold, per endpoint.
_LEARN_FIELDS = {
    "allow": ("url", "note"),
    "block": ("url", "category", "note"),
    "forget": ("url",),
}


def _on(state: ServiceState) -> bool:
    """Whether the learn endpoints are on (and so in the document)."""
    return state.learn is not None and state.token is not None


def _learn_body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }
    return json_body(schema)


_URL = {
    "type": "string",
    "maxLength": 8192,
    "description": "a URL, or a host name for the whole host",
}
_NOTE = {"type": "string", "maxLength": 1000, "description": "why (kept with it)"}
_CATEGORY = {
    "type": "string",
    "maxLength": 60,
    "default": "blocked",
    "description": "one directory name: no '/', '\\', blank, leading '.'",
}
_WRITTEN = {
    "200": json_ok("Override", "stored, overlay rebuilt and loaded"),
    **errors(400, 401, 404, 408, 413, 422, 503),
}


def _learn_admin(request: Request) -> tuple[ServiceState, LearnReview]:
    """The learner's admin, for an authorised caller: 404 when the service has no learner
    or no token (the endpoints do not exist then), 401 without the right token."""
    state = _state(request)
    if state.learn is None or state.token is None:
        missing = "[learn] with learn.directory" if state.learn is None else "service.token"
        raise ApiError(404, "learn_disabled", f"the learn endpoints are off: configure {missing}")
    _authorize(request, state.token)
    return state, state.learn


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


@API.get(
    "/v1/learn/verdicts",
    "A page of learned verdicts (by host, then rule)",
    token=True,
    listed=_on,
    params=(
        Param("source", schema={"enum": list(SOURCES)}),
        Param("action", schema={"enum": list(ACTIONS)}),
        Param("limit", schema={"type": "integer", "minimum": 1, "maximum": MAX_LEARN_PAGE}),
        Param("offset", schema={"type": "integer", "minimum": 0, "maximum": MAX_LEARN_OFFSET}),
    ),
    responses={
        "200": json_ok("LearnedPage", "the verdicts; next_offset is null on the last page"),
        **errors(400, 401, 404, 503),
    },
)
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


@API.get(
    "/v1/learn/verdict",
    "What was learned about a URL (its page's rule, else its host's)",
    token=True,
    listed=_on,
    params=(url_param("the URL (or host name)"),),
    responses={
        "200": json_ok("Learned", "the verdict and its evidence"),
        **errors(400, 401, 404, 422, 503),
    },
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


@API.post(
    "/v1/learn/allow",
    "Allow a URL (or a whole host) whatever is learned",
    token=True,
    listed=_on,
    body=_learn_body(["url"], {"url": _URL, "note": _NOTE}),
    responses=_WRITTEN,
)
async def learn_allow(request: Request) -> Response:
    """``POST /v1/learn/allow``: allow a URL (a bare host: the whole host) whatever is
    learned."""
    return await _override(request, "allow")


@API.post(
    "/v1/learn/block",
    "Block a URL (or a whole host) whatever is learned",
    token=True,
    listed=_on,
    body=_learn_body(["url"], {"url": _URL, "category": _CATEGORY, "note": _NOTE}),
    responses=_WRITTEN,
)
async def learn_block(request: Request) -> Response:
    """``POST /v1/learn/block``: block a URL (a bare host: the whole host) under a
    category (``blocked`` by default) whatever is learned."""
    return await _override(request, "block")


@API.post(
    "/v1/learn/forget",
    "Drop what was learned (or overridden) for a URL's rule",
    token=True,
    listed=_on,
    body=_learn_body(["url"], {"url": _URL}),
    responses={
        "200": {"description": '{"url", "forgotten": bool, "gateway", …}'},
        **errors(400, 401, 404, 408, 413, 422, 503),
    },
)
async def learn_forget(request: Request) -> Response:
    """``POST /v1/learn/forget``: drop the verdict (learned or override) for a URL's rule;
    ``"forgotten": false`` when there was none."""
    state, admin = _learn_admin(request)
    url = _learn_fields(await _json_body(request, state.limits), "forget")["url"]
    gone = await _learn_call(admin.forget, url)
    return JSONResponse({"url": url, "forgotten": gone, **(await _after_write(state, url, None))})
