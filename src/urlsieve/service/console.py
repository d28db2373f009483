"""The block page family and the admin console, served by ``urlsieve serve``.

Block pages (anyone may open them; the block page of the Squid helper and of a policy
points here, e.g. ``redirect_url = "http://gateway:8399/block?url=%u"``):

=========================  ==============================================================
``GET /block?url=``        what the gateway does with the URL *for this client now*: the
                           block page (category, reason, group, time, "this is wrong"),
                           the warning (with its continue form), the "checking this site"
                           page of the learning gateway, or a notice that it is allowed
``POST /block/review``     the "this is wrong" form: a review request (rate-limited per
                           client, the form's token tied to the client and URL)
``GET /static/urlsieve/*`` the pages' stylesheet and the console's one script
=========================  ==============================================================

Only the URL is read from the query: the category, reason and group are decided again by
the service for the client asking (the peer address, or what a trusted proxy says), so a
link cannot make the page say something the gateway did not decide.

The console (``/console/``, behind a login; only from ``console.clients``, loopback by
default): the live view of decisions with charts, explain, the review queue and the policy
as loaded. Every page sends a Content-Security-Policy without inline script or style;
every state-changing request is a POST carrying the session's anti-forgery token.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

import anyio
import jinja2
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from urlsieve.console import charts
from urlsieve.console.auth import RateLimit, Session, Sessions, sign, signed, verify_password
from urlsieve.console.i18n import Catalogs, negotiate
from urlsieve.console.reviews import MAX_NOTE, ReviewStore
from urlsieve.console.stream import ACTIONS, POLL_SECONDS, LiveDecisions, StreamReader
from urlsieve.exceptions import InvalidURL, LearnError, StoreError
from urlsieve.policy.clients import AddressSet, parse_address
from urlsieve.policy.engine import BLOCK, WARN, PolicyEngine, Who, explain_decision, parse_when

if TYPE_CHECKING:
    from urlsieve.gateway.config import GatewayConfig
    from urlsieve.gateway.learning import LearnReview
    from urlsieve.service.openapi import Endpoint
    from urlsieve.service.state import ServiceState

__all__ = ["Console", "PAGE_CSP", "CONSOLE_CSP"]

#: The console's templates, static files and translations (package data of urlsieve.console).
HERE = Path(__file__).parents[1] / "console"
Handler = Callable[[Request], Awaitable[Response]]
#: The block pages: no script at all; forms may post anywhere (continue redirects away).
PAGE_CSP = "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; " + (
    "base-uri 'none'"
)
#: The console: its one script, from this service only.
CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_COMMON_HEADERS = {
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
_STATIC = {"page.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
SESSION_COOKIE = "urlsieve_console"
LOGIN_COOKIE = "urlsieve_login"
#: Seconds a block page's "this is wrong" form stays good for.
REVIEW_SECONDS = 3600
#: Bytes of a page's form body.
MAX_FORM = 16 << 10
#: Review requests per client, and login attempts per address, per window.
REVIEWS_PER_CLIENT, REVIEW_WINDOW = 5, 600.0
LOGINS_PER_CLIENT, LOGIN_WINDOW = 5, 60.0
#: Reloads remembered for the policy page.
RELOAD_HISTORY = 20


class PageError(Exception):
    def __init__(self, status: int, title: str, detail: str) -> None:
        self.status, self.title, self.detail = status, title, detail
        super().__init__(detail)


def _clock(when: float | None) -> str:
    if when is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


class Console:
    """The pages of one service (see the module); :meth:`routes` for the app,
    :meth:`run` in the lifespan (tails the decision stream)."""

    def __init__(
        self,
        config: GatewayConfig,
        token: str | None,
        learn: LearnReview | None,
        log: Callable[[str], None] = lambda _msg: None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.token = token
        self.learn = learn
        self.log = log
        self.clock = clock
        self.password_hash = config.console_password_hash
        self.clients = AddressSet.of(parse_address(a) for a in config.console_clients)
        template_dir = Path(config.console_templates) if config.console_templates else None
        loaders: list[jinja2.BaseLoader] = []
        if template_dir is not None:
            loaders.append(jinja2.FileSystemLoader(str(template_dir)))
        loaders.append(jinja2.FileSystemLoader(str(HERE / "templates")))
        self.env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            auto_reload=False,
        )
        self.catalogs = Catalogs(
            HERE / "locale", template_dir / "locale" if template_dir is not None else None
        )
        self.static = {name: (HERE / "static" / name).read_bytes() for name in _STATIC}
        # A key for the pages' signed tokens: shared by services with one token.
        self.key = (
            hmac.new(token.encode(), b"urlsieve console pages", "sha256").digest()
            if token
            else secrets.token_bytes(32)
        )
        self.sessions = Sessions(config.console_session_minutes, clock=clock)
        self.logins = RateLimit(LOGINS_PER_CLIENT, LOGIN_WINDOW)
        self.review_limit = RateLimit(REVIEWS_PER_CLIENT, REVIEW_WINDOW)
        self.reviews = ReviewStore(config.console_reviews or ":memory:")
        self.live = LiveDecisions()
        self.reader = (
            StreamReader(config.decision_log, skip_pid=os.getpid()) if config.decision_log else None
        )
        self.flashes: dict[str, str] = {}
        self.reloads: deque[dict[str, Any]] = deque(maxlen=RELOAD_HISTORY)
        self._seen_reloads: tuple[int, int, int] | None = None
        self._category_counts: tuple[object, list[tuple[str, int]]] | None = None

    def close(self) -> None:
        self.reviews.close()

    # -- the stream ----------------------------------------------------------------------

    async def run(self, state: ServiceState) -> None:
        """Tail the decision stream and watch the reloads, until cancelled."""
        if self.reader is not None:
            await anyio.to_thread.run_sync(self.reader.start_at_end)
        while True:
            self._watch_reloads(state)
            if self.reader is not None:
                try:
                    events = await anyio.to_thread.run_sync(self.reader.poll)
                except Exception as exc:  # the console must outlive a damaged file
                    self.log(f"decision stream: {type(exc).__name__}: {exc}")
                    events = []
                if events:
                    self.live.add(events, self.clock())
            await anyio.sleep(POLL_SECONDS)

    def own(self, events: list[dict[str, Any]]) -> None:
        """This service's own decisions (also in the stream file, which :meth:`run`
        skips for them): into the live view at once."""
        self.live.add([dict(e) for e in events], self.clock())

    def _watch_reloads(self, state: ServiceState) -> None:
        rules = state.rules
        now = (rules.generation, rules.reloads, rules.failed_reloads)
        if now == self._seen_reloads:
            return
        if self._seen_reloads is None or now[2] == self._seen_reloads[2]:
            result = "loaded"
        else:
            result = f"failed: {rules.error}"
        self.reloads.appendleft(
            {
                "time": _clock(rules.loaded_at if result == "loaded" else self.clock()),
                "generation": rules.generation,
                "result": result,
            }
        )
        self._seen_reloads = now

    # -- rendering -----------------------------------------------------------------------

    def render(
        self,
        request: Request,
        name: str,
        *,
        status: int = 200,
        console: bool = False,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        lang = negotiate(request.headers.get("accept-language"), self.catalogs.languages)
        catalog = self.catalogs.gettext(lang)

        def gettext(text: str, **values: Any) -> str:
            out = catalog.get(text, text)
            return out % values if values else out

        base = request.scope.get("root_path", "")
        page = self.env.get_template(name).render(
            _=gettext,
            lang=lang,
            base=base,
            static=f"{base}/static/urlsieve",
            **context,
        )
        out = {**_COMMON_HEADERS, "content-security-policy": CONSOLE_CSP if console else PAGE_CSP}
        out.update(headers or {})
        return HTMLResponse(page, status_code=status, headers=out)

    def notice(self, request: Request, exc: PageError, *, console: bool = False) -> HTMLResponse:
        return self.render(
            request,
            "notice.html",
            status=exc.status,
            console=console,
            title=exc.title,
            detail=exc.detail,
            url=None,
        )

    def endpoints(self) -> list[Endpoint]:
        """The pages, for the service's routes and its OpenAPI document (HTML, not an API)."""
        from urlsieve.service.openapi import Endpoint, Param, form_body, html_page

        page = self._page
        html = {"200": html_page("an HTML page")}
        done = {**html, "303": {"description": "done: see Location"}}

        def get(path: str, handler: Handler, summary: str, **fields: Any) -> Endpoint:
            return Endpoint(path, "GET", handler, summary, html, raw=True, **fields)

        def post(path: str, handler: Handler, summary: str) -> Endpoint:
            return Endpoint(path, "POST", handler, summary, done, body=form_body(), raw=True)

        name = Param("name", "page.css or live.js", where="path")
        filters = tuple(
            Param(n, f"only this {n}") for n in ("client", "group", "category", "action")
        )
        after = {"type": "integer", "minimum": 0}
        return [
            get("/static/urlsieve/{name}", self.static_file, "The pages' stylesheet and script",
                params=(name,)),
            get("/block", page(self.block_page), "The block page family for ?url= and this client",
                params=(Param("url", "the URL the gateway decided on", required=True),)),
            post("/block/review", page(self.block_review), "A review request ('this is wrong')"),
            get("/console", self.to_console, "Redirects to /console/"),
            get("/console/", page(self.live_page, console=True),
                "The live view of decisions, with charts", params=filters),
            get("/console/events", page(self.events, console=True),
                "The live view's new decisions (JSON; a session)",
                params=(Param("after", "the last event seen", schema=after), *filters)),
            get("/console/login", page(self.login_page, console=True), "The console's login"),
            post("/console/login", page(self.login, console=True),
                 "Log in (password or service token)"),
            post("/console/logout", page(self.logout, console=True), "Log out"),
            get("/console/explain", page(self.explain_page, console=True),
                "Explain a URL for a client and time",
                params=tuple(Param(n, f"the form's {n}") for n in ("url", "client", "user", "at"))),
            get("/console/review", page(self.review_page, console=True), "The review queue"),
            post("/console/review", page(self.review_action, console=True),
                 "Approve, override, forget, allow or dismiss"),
            get("/console/policy", page(self.policy_page, console=True), "The policy as loaded"),
        ]  # fmt: skip

    def _page(
        self, handler: Callable[[Request], Awaitable[Response]], *, console: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        from urlsieve.service.errors import ApiError

        async def endpoint(request: Request) -> Response:
            try:
                if console:
                    self._console_peer(request)
                return await handler(request)
            except PageError as exc:
                return self.notice(request, exc, console=console)
            except ApiError as exc:
                return self.notice(
                    request,
                    PageError(exc.status, "The request was refused", exc.detail),
                    console=console,
                )

        endpoint.__name__ = handler.__name__
        return endpoint

    async def static_file(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.static:
            return Response(b"not found\n", status_code=404, media_type="text/plain")
        return Response(
            self.static[name],
            media_type=_STATIC[name],
            headers={"cache-control": "max-age=300", "x-content-type-options": "nosniff"},
        )

    async def to_console(self, request: Request) -> Response:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/console/", 308)

    # -- who asks ------------------------------------------------------------------------

    @staticmethod
    def _state(request: Request) -> ServiceState:
        from urlsieve.service.shared import state_of as _state

        return _state(request)

    def _page_who(self, request: Request) -> Who:
        """Who opened the page: the peer, or what a trusted proxy's header says. The query
        is not read (the redirect's ``client=`` is the client's own claim)."""
        from urlsieve.service.shared import who as _who

        bare = Request({**request.scope, "query_string": b""})
        return _who(bare, self._state(request))

    def _console_peer(self, request: Request) -> str:
        from urlsieve.service.shared import peer as _peer

        peer = _peer(request, self._state(request))
        if peer is None or peer not in self.clients:
            raise PageError(
                403,
                "The request was refused",
                "the console answers only the addresses in console.clients (loopback by default)",
            )
        return peer

    async def _form(self, request: Request) -> dict[str, str]:
        """The urlencoded form, each field at most once (UTF-8), from this site's pages."""
        from dataclasses import replace

        from urlsieve.service.shared import read_body as _read_body

        fetched_from = request.headers.get("sec-fetch-site")
        if fetched_from is not None and fetched_from not in ("same-origin", "none"):
            raise PageError(403, "The request was refused", "a form of another site")
        state = self._state(request)
        body = await _read_body(request, replace(state.limits, max_body=MAX_FORM))
        out: dict[str, str] = {}
        for pair in body.split(b"&"):
            raw_key, _, raw_value = pair.partition(b"=")
            try:
                key = unquote_to_bytes(raw_key.replace(b"+", b" ")).decode("utf-8")
                value = unquote_to_bytes(raw_value.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                raise PageError(400, "The request was refused", "the form is not UTF-8") from None
            if not key:
                continue
            if key in out:
                raise PageError(
                    400, "The request was refused", f"the form holds {key[:40]!r} twice"
                )
            out[key] = value
        return out

    # -- the block page family ----------------------------------------------------------

    def _facts(self, state: ServiceState, url: str, who: Who) -> dict[str, Any]:
        """What the gateway does with ``url`` for ``who`` now, in words."""
        from urlsieve.service.shared import filter_of as _filter_of
        from urlsieve.service.shared import loaded as _loaded

        loaded = _loaded(state)
        facts: dict[str, Any] = {"group": None, "evidence": [], "category": None}
        if isinstance(loaded, PolicyEngine):
            decision = loaded.decide(url, who)
            facts["group"] = decision.source
            facts["category"] = decision.category
            acl = loaded.policy.acls.get(decision.acl)
            time_rule = ""
            if acl is not None and acl.time is not None:
                side = "within" if decision.within else "outside"
                time_rule = f", {side} time rule {acl.time}"
            group = (
                "group %(group)s, rule %(acl)s%(time)s",
                decision.source,
                decision.acl,
                time_rule,
            )
            if decision.action in (BLOCK, WARN):
                facts["kind"] = "warn" if decision.action == WARN else "block"
                if decision.rule_id >= 0:
                    rule = loaded.rules.rule(decision.rule_id)
                    facts["reason"] = (
                        "blocked by the list %(list)s (%(where)s)",
                        rule.category,
                        rule.where,
                    )
                else:
                    facts["reason"] = group
                facts["policy"] = group
            else:
                facts["kind"] = "allow"
            return facts
        rules = _filter_of(loaded)
        verdict = rules.check(url)
        facts["category"] = verdict.category
        if verdict.action == "block":
            facts["kind"] = "block"
            deciding = verdict.rule
            learned = self._learned(url)
            if (
                learned is not None
                and learned["action"] == "block"
                and (learned["category"] == verdict.category)
            ):
                if learned["source"] == "override":
                    facts["reason"] = ("blocked by an administrator",)
                else:
                    facts["reason"] = (
                        "learned: the page's text scored %(score)s",
                        learned["score"],
                    )
                facts["evidence"] = learned.get("evidence") or []
            elif deciding is not None:
                facts["reason"] = (
                    "blocked by the list %(list)s (%(where)s)",
                    deciding.category,
                    deciding.where,
                )
            else:
                facts["reason"] = ("blocked",)
        elif verdict.rule is None and state.block_unknown:
            facts["kind"] = "pending"
        else:
            facts["kind"] = "allow"
        return facts

    async def _facts_of(self, state: ServiceState, url: str, who: Who) -> dict[str, Any]:
        try:
            return await run_in_threadpool(self._facts, state, url, who)
        except InvalidURL as exc:
            raise PageError(422, "The request was refused", exc.reason) from None
        except StoreError as exc:  # the warn store, asked for grants
            raise PageError(503, "The request was refused", str(exc)[:500]) from None

    def _learned(self, url: str) -> dict[str, Any] | None:
        if self.learn is None:
            return None
        try:
            return self.learn.show(url)
        except (LearnError, ValueError):
            return None

    @staticmethod
    def _words(reason: tuple[Any, ...] | None, gettext: Callable[[str], str]) -> str:
        if not reason:
            return "-"
        text, *values = reason
        names: tuple[str, ...] = ("group", "acl", "time")
        if "%(list)s" in text:
            names = ("list", "where")
        elif "%(score)s" in text:
            names = ("score",)
        out = gettext(text)
        return out % dict(zip(names, values, strict=False)) if values else out

    def _review_token(self, who: Who, url: str, expires: int) -> str:
        return f"{expires}.{sign(self.key, 'review', who.client or '-', url, str(expires))}"

    def _review_ok(self, who: Who, url: str, token: str) -> bool:
        expires, _, _tag = token.partition(".")
        if not (expires.isdigit() and len(expires) <= 12) or int(expires) < self.clock():
            return False
        return hmac.compare_digest(
            token.encode(), self._review_token(who, url, int(expires)).encode()
        )

    async def block_page(self, request: Request) -> Response:
        from urlsieve.service.pages import confirmation
        from urlsieve.service.shared import url_param as _url_param

        state = self._state(request)
        url = _url_param(request)
        who = self._page_who(request)
        facts = await self._facts_of(state, url, who)
        lang = negotiate(request.headers.get("accept-language"), self.catalogs.languages)
        catalog = self.catalogs.gettext(lang)
        reason = self._words(facts.get("reason"), lambda t: catalog.get(t, t))
        common = {
            "url": url,
            "category": facts["category"],
            "group": facts["group"],
            "when": _clock(self.clock()),
            "reason": reason,
            "evidence": facts["evidence"],
        }
        kind = facts["kind"]
        if kind == "block":
            token = self._review_token(who, url, int(self.clock()) + REVIEW_SECONDS)
            return self.render(request, "block.html", review_token=token, **common)
        if kind == "warn":
            engine = state.rules.get()
            assert isinstance(engine, PolicyEngine)
            token = confirmation(state.continue_key, who, url, int(self.clock()) + 600)
            minutes = max(1, engine.policy.warn_seconds // 60)
            return self.render(request, "warn.html", token=token, minutes=minutes, **common)
        if kind == "pending":
            return self.render(request, "pending.html", **common)
        return self.render(
            request,
            "notice.html",
            title=catalog.get(
                "This address is not blocked for you now", "This address is not blocked for you now"
            ),
            detail=catalog.get(
                "Nothing blocks it at the moment.", "Nothing blocks it at the moment."
            ),
            url=url,
        )

    def warn_page(
        self, request: Request, url: str, category: str | None, minutes: int, token: str
    ) -> Response:
        """The confirmation page of ``GET /v1/continue`` (the service's), in this family."""
        return self.render(
            request,
            "warn.html",
            url=url,
            category=category,
            group=None,
            when=_clock(self.clock()),
            reason="-",
            evidence=[],
            token=token,
            minutes=minutes,
        )

    async def block_review(self, request: Request) -> Response:
        state = self._state(request)
        form = await self._form(request)
        url, token = form.get("url", ""), form.get("token", "")
        who = self._page_who(request)
        if not url or not self._review_ok(who, url, token):
            raise PageError(
                403,
                "The request was refused",
                "the form is missing its token, expired, or was given to another client or "
                "URL: open the block page again",
            )
        note = form.get("note", "")[:MAX_NOTE]
        key = who.client or "-"
        if not self.review_limit.allow(key):
            wait = int(self.review_limit.retry_after(key)) + 1
            raise PageError(
                429,
                "Too many requests",
                f"You sent too many review requests; try again later. ({wait} s)",
            )
        facts = await self._facts_of(state, url, who)
        reason = self._words(facts.get("reason"), lambda t: t)
        await run_in_threadpool(
            lambda: self.reviews.add(
                url,
                client=who.client,
                category=facts["category"],
                reason=reason,
                note=note,
                now=self.clock(),
            )
        )
        lang = negotiate(request.headers.get("accept-language"), self.catalogs.languages)
        catalog = self.catalogs.gettext(lang)
        title = "Thank you: your request was sent"
        detail = "An administrator will look at this address."
        return self.render(
            request,
            "notice.html",
            title=catalog.get(title, title),
            detail=catalog.get(detail, detail),
            url=url,
        )

    # -- login and sessions --------------------------------------------------------------

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def _checked_post(self, session: Session, form: dict[str, str]) -> None:
        if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode()):
            raise PageError(
                403,
                "The request was refused",
                "the form's anti-forgery token is missing or not this session's: reload the page",
            )

    def _cookie_flags(self, request: Request) -> dict[str, Any]:
        return {
            "httponly": True,
            "samesite": "strict",
            "secure": self.config.console_secure_cookies or request.url.scheme == "https",
            "path": f"{request.scope.get('root_path', '')}/console",
        }

    async def login_page(
        self, request: Request, *, error: str | None = None, status: int = 200
    ) -> Response:
        pre = request.cookies.get(LOGIN_COOKIE)
        if not pre or len(pre) > 100:
            pre = secrets.token_urlsafe(24)
        response = self.render(
            request,
            "login.html",
            console=True,
            status=status,
            session=None,
            flash=None,
            error=error
            if error
            else (
                None
                if self.password_hash or self.token
                else "The console is off: set console.password_hash or service.token"
            ),
            login_token=sign(self.key, "login", pre),
        )
        response.set_cookie(LOGIN_COOKIE, pre, max_age=3600, **self._cookie_flags(request))
        return response

    async def login(self, request: Request) -> Response:
        peer = self._console_peer(request)
        form = await self._form(request)
        pre = request.cookies.get(LOGIN_COOKIE, "")
        if not pre or not signed(self.key, form.get("csrf", ""), "login", pre):
            return await self.login_page(
                request, error="The login form expired: try again", status=403
            )
        if not self.logins.allow(peer):
            wait = int(self.logins.retry_after(peer)) + 1
            return await self.login_page(
                request, error=f"Too many login attempts: wait {wait} s", status=429
            )
        password = form.get("password", "")
        ok = False
        if self.password_hash:
            ok = await run_in_threadpool(verify_password, self.password_hash, password)
        if not ok and self.token:
            ok = hmac.compare_digest(password.encode("utf-8", "replace"), self.token.encode())
        if not ok:
            return await self.login_page(request, error="Wrong password", status=401)
        session = self.sessions.start()
        base = request.scope.get("root_path", "")
        response = RedirectResponse(f"{base}/console/", 303)
        response.set_cookie(
            SESSION_COOKIE,
            session.sid,
            max_age=int(self.sessions.seconds),
            **self._cookie_flags(request),
        )
        response.set_cookie(LOGIN_COOKIE, "", max_age=0, **self._cookie_flags(request))
        return response

    async def logout(self, request: Request) -> Response:
        session = self._session(request)
        form = await self._form(request)
        base = request.scope.get("root_path", "")
        if session is not None:
            self._checked_post(session, form)
            self.sessions.end(session.sid)
        response = RedirectResponse(f"{base}/console/login", 303)
        response.set_cookie(SESSION_COOKIE, "", max_age=0, **self._cookie_flags(request))
        return response

    def _to_login(self, request: Request) -> Response:
        return RedirectResponse(f"{request.scope.get('root_path', '')}/console/login", 303)

    # -- console pages ------------------------------------------------------------------

    def _filters(self, request: Request) -> dict[str, str]:
        from urlsieve.service.shared import one_query as _one_query

        out = {}
        for name in ("client", "group", "category", "action"):
            value = (_one_query(request, name) or "")[:100]
            out[name] = value
        if out["action"] and out["action"] not in ACTIONS:
            out["action"] = ""
        return out

    @staticmethod
    def _shown(e: dict[str, Any]) -> dict[str, Any]:
        return {**e, "time": _clock(e["t"])}

    async def live_page(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._to_login(request)
        filters = self._filters(request)
        events = [self._shown(e) for e in self.live.after(0, filters, 200)]
        now = self.clock()
        hour = self.live.series(60, 1, now)
        day = self.live.series(24 * 60, 15, now)
        categories: Counter[str] = Counter()
        for bucket in hour:
            categories.update(bucket.categories)
        enforce = await run_in_threadpool(self._time_to_enforce, now)
        return self.render(
            request,
            "live.html",
            console=True,
            session=session,
            flash=self.flashes.pop(session.sid, None),
            filters=filters,
            actions=ACTIONS,
            events=events,
            after=self.live.seq,
            stream=self.config.decision_log,
            hour_chart=Markup(charts.activity(hour, "min")),
            day_chart=Markup(charts.activity(day, "15 min")),
            category_chart=Markup(charts.categories(categories.most_common(10))),
            enforce_chart=Markup(charts.durations(enforce)),
        )

    def _time_to_enforce(self, now: float) -> list[float]:
        """Seconds from first seen to decided, for verdicts learned in the last day."""
        if self.learn is None:
            return []
        try:
            page = self.learn.list("learned", None, 5000, 0)
        except (LearnError, ValueError):
            return []
        out = []
        for v in page:
            first, decided = v.get("first_seen"), v.get("decided_at")
            if (
                isinstance(first, int | float)
                and isinstance(decided, int | float)
                and now - 86400 <= decided
                and decided >= first
            ):
                out.append(float(decided - first))
        return out

    async def events(self, request: Request) -> Response:
        from urlsieve.service.shared import count_param as _count_param

        if self._session(request) is None:
            return JSONResponse({"error": "unauthorized", "detail": "log in"}, status_code=401)
        after = _count_param(request, "after", 0, 0, 10**15)
        events = [self._shown(e) for e in self.live.after(after, self._filters(request), 500)]
        base = request.scope.get("root_path", "")
        return JSONResponse(
            {
                "events": events,
                "after": max(after, self.live.seq),
                "explain": f"{base}/console/explain",
            },
            headers={"cache-control": "no-store"},
        )

    async def explain_page(self, request: Request) -> Response:
        from urlsieve.service.shared import one_query as _one_query

        session = self._session(request)
        if session is None:
            return self._to_login(request)
        form = {
            name: (_one_query(request, name) or "")[: 8192 if name == "url" else 100]
            for name in ("url", "client", "user", "at")
        }
        result = error = None
        if form["url"]:
            try:
                result = await run_in_threadpool(self._explain, self._state(request), form)
            except InvalidURL as exc:
                error = f"not a URL: {exc.reason}"
            except ValueError as exc:
                error = str(exc)
            except StoreError as exc:  # the warn store, asked for grants
                error = f"the warn store cannot be read: {exc}"
        return self.render(
            request,
            "explain.html",
            console=True,
            session=session,
            flash=None,
            form=form,
            result=result,
            error=error,
        )

    def _explain(self, state: ServiceState, form: dict[str, str]) -> dict[str, Any]:
        from urlsieve.service.shared import filter_of as _filter_of
        from urlsieve.service.shared import loaded as _loaded

        loaded = _loaded(state)
        url = form["url"]
        explanation = _filter_of(loaded).explain(url)
        rule = explanation.rule
        result: dict[str, Any] = {
            "canonical": explanation.canonical,
            "action": explanation.verdict.action,
            "category": explanation.verdict.category,
            "rule": f"{rule.pattern} ({rule.category}, {rule.where})" if rule else None,
            "matching": explanation.matching,
            "probes": explanation.probes,
            "policy": None,
            "learned": self._learned(url),
        }
        if isinstance(loaded, PolicyEngine):
            who = Who(form["client"] or None, None, form["user"] or None)
            at = parse_when(form["at"] or None, loaded.policy.timezone)
            # Another time: a fresh engine, so the shared one keeps its clock.
            engine = (
                loaded
                if at is None
                else PolicyEngine(
                    loaded.policy,
                    loaded.rules,
                    expressions=loaded.expressions,
                    grants=loaded.grants,
                )
            )
            result["policy"] = explain_decision(engine, url, who, at)
            decision = engine.decide(url, who, at)
            result["action"] = decision.action
            result["category"] = decision.category
        elif form["at"]:
            parse_when(form["at"])  # checked; a filter has no time rules
        return result

    async def review_page(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._to_login(request)
        requests = await run_in_threadpool(self.reviews.open, 200)
        for r in requests:
            r["time"] = _clock(r["asked_at"])
        verdicts: list[dict[str, Any]] = []
        if self.learn is not None:
            try:
                verdicts = await run_in_threadpool(self.learn.list, None, None, 200, 0)
            except (LearnError, ValueError) as exc:
                self.flashes[session.sid] = f"the learned verdicts cannot be read: {exc}"
        for v in verdicts:
            v["target"] = v["key"] if v.get("is_host") else f"http://{v['key']}"
        return self.render(
            request,
            "review.html",
            console=True,
            session=session,
            flash=self.flashes.pop(session.sid, None),
            requests=requests,
            verdicts=verdicts,
            learning=self.learn is not None,
        )

    async def review_action(self, request: Request) -> Response:
        from urlsieve.service.shared import after_write as _after_write

        session = self._session(request)
        if session is None:
            return self._to_login(request)
        form = await self._form(request)
        self._checked_post(session, form)
        state = self._state(request)
        do, url = form.get("do", ""), form.get("url", "")
        base = request.scope.get("root_path", "")
        done = RedirectResponse(f"{base}/console/review", 303)
        request_id = form.get("request", "")
        if do == "dismiss":
            if request_id.isdigit():
                await run_in_threadpool(self.reviews.close_request, int(request_id), "kept")
            self.flashes[session.sid] = f"kept blocked: {url}"
            return done
        if do not in ("approve", "override", "forget", "allow"):
            raise PageError(400, "The request was refused", "unknown review action")
        learn = self.learn
        if learn is None:
            self.flashes[session.sid] = (
                "the learner is not configured: add the URL to an allow list instead"
            )
            return done
        was = form.get("was", "")
        category = form.get("category") or None
        action: str | None
        try:
            if do == "forget":
                action = None
                await run_in_threadpool(learn.forget, url)
            else:
                if do == "approve":
                    action = was if was in ("allow", "block") else "block"
                elif do == "override":
                    action = "allow" if was == "block" else "block"
                else:
                    action = "allow"
                # A block keeps the learned block's category; a flipped allow has none
                # (the learner's default, "blocked").
                keep = category if action == "block" and was == "block" else None
                note = "review request" if do == "allow" else f"{do} in the console"
                # The learner takes None: the default category ("blocked") for a block.
                override: Callable[..., Any] = learn.override
                await run_in_threadpool(override, url, action, keep, note)
        except LearnError as exc:
            raise PageError(503, "The request was refused", str(exc)[:500]) from None
        except ValueError as exc:
            raise PageError(422, "The request was refused", str(exc)[:500]) from None
        after = await _after_write(state, url, action)
        if do == "allow" and request_id.isdigit():
            await run_in_threadpool(self.reviews.close_request, int(request_id), "allowed")
        gateway = after.get("gateway") or {}
        message = f"{do}: {url} — the gateway now answers {gateway.get('action', '?')}"
        if after.get("warning"):
            message += f" ({after['warning']})"
        self.flashes[session.sid] = message
        return done

    async def policy_page(self, request: Request) -> Response:
        from urlsieve.gateway.ruleset import rules_info
        from urlsieve.service.shared import filter_of as _filter_of
        from urlsieve.service.shared import loaded as _loaded

        session = self._session(request)
        if session is None:
            return self._to_login(request)
        state = self._state(request)
        live = state.rules
        loaded = _loaded(state)
        rules = _filter_of(loaded)
        info = rules_info(rules, live.loaded_at, live.generation)
        categories = await run_in_threadpool(self._categories, rules)
        groups: list[dict[str, Any]] = []
        times: list[dict[str, Any]] = []
        acls: list[dict[str, Any]] = []
        if isinstance(loaded, PolicyEngine):
            policy = loaded.policy
            now = loaded._local(self.clock())
            groups = [{"name": s.name, "where": s.where} for s in policy.sources]
            times = [{"name": name, "now": rule.holds(now)} for name, rule in policy.times.items()]
            acls = [
                {
                    "name": name,
                    "time": acl.time,
                    "passes": " ".join(str(e) for e in acl.branch.passes),
                }
                for name, acl in policy.acls.items()
            ]
        return self.render(
            request,
            "policy.html",
            console=True,
            session=session,
            flash=None,
            info={
                "rules": info.get("rules"),
                "source": info.get("source"),
                "path": info.get("path"),
                "generation": live.generation,
            },
            loaded_at=_clock(live.loaded_at),
            reloads={"ok": live.reloads, "failed": live.failed_reloads},
            error=live.error,
            history=list(self.reloads),
            categories=categories,
            groups=groups,
            times=times,
            acls=acls,
        )

    def _categories(self, rules: Any) -> list[tuple[str, int]]:
        cached = self._category_counts
        if cached is not None and cached[0] is rules:
            return cached[1]
        counts = Counter(rule.category for rule in rules.rules if rule.action == "block")
        out = sorted(counts.items())
        self._category_counts = (rules, out)
        return out
