"""What the service's endpoints share: its limits, its state (created by the lifespan of
:func:`urlsieve.service.app.create_app`) and the reloader of its rules."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from urlsieve.filter import Filter
from urlsieve.gateway.learning import LearnReview
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.metrics import Metrics
from urlsieve.gateway.unknown import BurstGate, UnknownFeed
from urlsieve.policy.clients import AddressSet
from urlsieve.policy.engine import PolicyEngine
from urlsieve.seen import SeenStore
from urlsieve.service.errors import ApiError

__all__ = ["Reloader", "ServiceLimits", "ServiceState"]

#: The file-change check never runs more often than this, whatever reload_check_seconds says.
MIN_CHECK_SECONDS = 0.1
#: How often the reloader reads the learned overlay's change counter (one ``pread``).
NOTICE_SECONDS = MIN_CHECK_SECONDS


@dataclass(frozen=True)
class ServiceLimits:
    """The service's hard caps; the defaults are documented in the README (Lookup service).

    ``max_body`` and ``body_timeout`` are enforced by the application; the others by
    the server (:mod:`urlsieve.service.server`, ``urlsieve serve``).
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


def _process_key() -> bytes:
    """A continue key drawn at random for one process (:func:`.pages.continue_key` of no
    token)."""
    return secrets.token_bytes(32)


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
    #: What continue confirmations are signed with (:func:`.pages.continue_key`).
    continue_key: bytes = field(default_factory=_process_key)
    #: The decision stream's writer (``console.decision_log``; urlsieve.console.stream).
    decisions: Any = None
    #: The block pages and the console (urlsieve.service.console.Console); None: no Jinja2.
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
