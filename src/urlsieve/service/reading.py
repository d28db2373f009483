"""Reading a request, whatever its bytes: the query's parameters (percent-decoded, each at
most once), the body against :class:`~.state.ServiceLimits` (size, time) parsed strictly as
JSON (UTF-8, no duplicate keys, no ``NaN``, bounded numbers and nesting), who asks (for a
policy) and the bearer token. Each refusal is an :class:`~.errors.ApiError` saying what
and where."""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar
from urllib.parse import unquote_to_bytes

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from urlsieve.gateway.headers import (
    FORWARDING_HEADERS,
    address_key,
    last_named,
    named_addresses,
)
from urlsieve.policy.engine import Who
from urlsieve.service.errors import ApiError
from urlsieve.service.state import ServiceLimits, ServiceState

T = TypeVar("T")

MAX_BATCH = 10_000
#: Work up to this size (URLs, characters) is done on the event loop; more goes to a thread.
INLINE_BATCH = 256
INLINE_CHARS = 8_192
#: The longest number a body may hold (no field takes a number; this only bounds parsing).
MAX_NUMBER_DIGITS = 64


async def _off_loop(cost: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, in a worker thread when ``cost`` (characters) is large."""
    if cost > INLINE_CHARS:
        return await run_in_threadpool(fn, *args)
    return fn(*args)


def _chars(urls: list[str]) -> int:
    return len(urls) * (INLINE_CHARS // INLINE_BATCH) + sum(map(len, urls))


# -- who asks ---------------------------------------------------------------------------


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


def _authorize(request: Request, token: str) -> None:
    """The request carries ``Authorization: Bearer <token>`` (compared in constant time),
    else :class:`ApiError` 401."""
    auth = request.headers.get("authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <token>")
    if not hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode()):
        raise ApiError(401, "unauthorized", "wrong token")


# -- the query --------------------------------------------------------------------------


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


def _form_field(body: bytes, name: str) -> bytes:
    values = _query_values(body, name.encode())
    if len(values) != 1:
        raise ApiError(
            400, "invalid_form", f"the form must hold {name} once (it holds it {len(values)} times)"
        )
    return values[0]


# -- the body ---------------------------------------------------------------------------


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
