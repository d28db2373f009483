"""``POST /v1/seen``: add URLs to, or test them against, the configured seen store."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from urlsieve.exceptions import InvalidURL, StoreError
from urlsieve.fingerprint import canonical_bytes
from urlsieve.seen import SeenStore
from urlsieve.service.check import invalid_url_json
from urlsieve.service.errors import ApiError
from urlsieve.service.openapi import Endpoints, errors, json_body, json_ok, ref
from urlsieve.service.reading import _chars, _json_body, _kind, _off_loop, _url_list
from urlsieve.service.state import _state

API = Endpoints()

SeenResult = bool | dict[str, Any]


def _seen_op(data: dict[str, Any]) -> str:
    if "op" not in data:
        raise ApiError(400, "invalid_body", 'the body has no "op": say "add" or "test"')
    op = data["op"]
    if op not in ("add", "test"):
        shown = repr(op[:40]) if isinstance(op, str) else _kind(op)
        raise ApiError(400, "invalid_body", f'"op" must be "add" or "test", not {shown}')
    return str(op)


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


@API.post(
    "/v1/seen",
    "Add URLs to, or test them against, the seen store",
    body=json_body(ref("SeenOp")),
    responses={
        "200": json_ok("SeenResult", "one flag (or error) per URL, in order"),
        **errors(400, 404, 408, 413, 422, 503),
    },
)
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
