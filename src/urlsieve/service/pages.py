"""The pages a browser is sent to from a verdict: the confirmation of a policy warning
(``GET /v1/continue``, its form ``POST /v1/continue``: signed tokens, grants) and the
"checking this site" page of an unknown site past its burst (``GET /v1/pending``). Both
are HTML, never framed, cached or sent on as a referrer."""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import time
from dataclasses import replace

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from urlsieve.exceptions import InvalidURL, StoreError
from urlsieve.gateway.pending import pending_page
from urlsieve.gateway.unknown import site_of
from urlsieve.policy.engine import WARN, Decision, PolicyEngine, Who
from urlsieve.service.errors import ApiError
from urlsieve.service.openapi import WHO, Endpoints, errors, form_body, html_page, url_param
from urlsieve.service.reading import (
    _decoded_url,
    _form_field,
    _off_loop,
    _read_body,
    _url_param,
    _who,
)
from urlsieve.service.state import ServiceState, _loaded, _rules, _state

API = Endpoints()

#: Seconds the confirmation page of a warning (``GET /v1/continue``) stays good for.
CONFIRM_SECONDS = 600
#: Bytes of the confirmation form (``POST /v1/continue``: the URL and the token).
MAX_CONFIRM_BODY = 64 << 10


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


@API.get(
    "/v1/pending",
    "The checking page of a URL of an unknown site past its burst "
    "(learn.pending = 'check'): it reloads itself until the URL has a verdict",
    params=(url_param("the URL the gateway answered pending"),),
    responses={
        "200": html_page(
            "an HTML page: checking (reloads every second), allowed (refreshes to the URL) "
            "or blocked"
        ),
        **errors(400, 422, 503),
    },
)
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


@API.get(
    "/v1/continue",
    "The confirmation page of a policy warning (?category), which the warning page links "
    "to; it grants nothing",
    params=(url_param("the URL the warning page was shown for"), *WHO),
    responses={
        "200": html_page(
            "an HTML page whose form posts the URL and a token tied to this client and URL "
            "(good for 10 minutes)"
        ),
        **errors(400, 403, 404, 409, 422, 503),
    },
)
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


@API.post(
    "/v1/continue",
    "Continue past a policy warning: the client is let through to the URL's site for the "
    "policy's warn_minutes",
    params=WHO,
    body=form_body(
        {
            "type": "object",
            "required": ["url", "token"],
            "properties": {"url": {"type": "string"}, "token": {"type": "string"}},
        }
    ),
    responses={
        "303": {"description": "granted; Location is the URL as given"},
        **errors(400, 403, 404, 408, 409, 413, 422, 503),
    },
)
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
