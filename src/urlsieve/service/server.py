"""Running the lookup service on uvicorn, with the caps uvicorn lacks.

uvicorn bounds the header size (``h11_max_incomplete_event_size``) and idle
keep-alive connections (``timeout_keep_alive``), but it waits for a request's
headers forever (a client sending one byte at a time holds a connection, and a
client that connects and sends nothing is never cut off), and its
``limit_concurrency`` answers 503 only once a request has arrived, counting
held-open connections that never send one. :class:`GuardedH11Protocol` adds:

- a header timer, from the connection (or from the first byte of the next
  request) to the end of the headers: ``408`` and close after
  :attr:`ServiceLimits.header_timeout`;
- a connection cap: a connection beyond :attr:`ServiceLimits.max_connections`
  is answered ``503`` and closed as soon as it is accepted;
- one framing per request: h11 reads a request with both ``Transfer-Encoding``
  and ``Content-Length`` by its chunks (and runs whatever follows the last chunk
  as the next request), and folds repeated equal lengths into one. A request
  whose head frames it two ways (:func:`~urlsieve.gateway.headers.framing_problem`,
  on the head as received) is answered ``400`` and the connection closed before
  the application sees it, so nothing after it on the connection is run.

uvicorn's proxy-header handling is off (``proxy_headers=False``; it is on by
default and, trusting 127.0.0.1, lets a local client set its address with
``X-Forwarded-For``): the application reads a trusted proxy's header itself
(``service.trusted_proxies``, ``service.client_header``).

:func:`serve` binds the socket itself, so an address in use is a
:class:`ConfigError` (``urlsieve serve`` exits 2) rather than uvicorn's exit 3.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any, ClassVar

import h11
import uvicorn
from h11._receivebuffer import ReceiveBuffer
from uvicorn.protocols.http.h11_impl import H11Protocol

from urlsieve.exceptions import ConfigError
from urlsieve.gateway.headers import framing_problem
from urlsieve.service.app import ServiceLimits

__all__ = ["GuardedH11Protocol", "OneFramingConnection", "guarded_protocol", "listen", "serve"]


def _reply(status: str, code: str, detail: str) -> bytes:
    body = json.dumps({"error": code, "detail": detail}).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _HeadRecorder(ReceiveBuffer):
    """h11's receive buffer, keeping the lines of the last head it gave h11: h11 passes on
    a request's headers with equal lengths folded, and the raw head says what was sent."""

    head: list[bytearray] | None = None

    def maybe_extract_lines(self) -> list[bytearray] | None:
        lines = super().maybe_extract_lines()
        if lines is not None:
            self.head = lines
        return lines


def _fields(head: list[bytearray]) -> list[tuple[bytes, bytes]]:
    """(name, value) of a head's header lines (a folded continuation line is no field)."""
    return [
        (bytes(line.partition(b":")[0]), bytes(line.partition(b":")[2]))
        for line in head[1:]
        if not line.startswith((b" ", b"\t"))
    ]


class OneFramingConnection(h11.Connection):
    """An h11 server connection that refuses a request its head frames two ways, with
    :class:`h11.RemoteProtocolError` (uvicorn answers 400 and closes); :attr:`refusal`
    is the error code and why, for this and for h11's own refusals."""

    def __init__(self, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_incomplete_event_size)
        if not isinstance(getattr(self, "_receive_buffer", None), ReceiveBuffer):
            raise RuntimeError("this h11 keeps its receive buffer elsewhere: cannot see heads")
        self._heads = _HeadRecorder()
        self._receive_buffer = self._heads
        self.refusal: tuple[str, str] | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            self.refusal = ("bad_request", str(exc))
            raise
        if isinstance(event, h11.Request):
            head = self._heads.head
            problem = (
                "the request head was not seen"
                if head is None
                else framing_problem(event.http_version.decode("ascii"), _fields(head))
            )
            self._heads.head = None
            if problem is not None:
                self.refusal = ("ambiguous_framing", problem)
                raise h11.RemoteProtocolError(problem, error_status_hint=400)
        return event


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, a connection cap and one framing
    per request (see the module)."""

    limits: ClassVar[ServiceLimits] = ServiceLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = OneFramingConnection(self.limits.max_header_bytes)
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 (or the framing check) refuses: 400 with the
        reason as the service's JSON error, and the connection closed."""
        code, detail = getattr(self.conn, "refusal", None) or ("bad_request", msg)
        self.transport.write(_reply("400 Bad Request", code, detail[:500]))
        self.transport.close()

    def connection_made(  # type: ignore[override]
        self, transport: asyncio.Transport
    ) -> None:
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            detail = f"more than {self.limits.max_connections} open connections: retry later"
            transport.write(_reply("503 Service Unavailable", "too_many_connections", detail))
            transport.close()
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the first byte of the next request on a kept-alive one
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if self._refused:
            return
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout, self._headers_too_slow
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        detail = f"the request headers did not arrive within {self.limits.header_timeout:g} s"
        self.transport.write(_reply("408 Request Timeout", "header_timeout", detail))
        self.transport.close()


def guarded_protocol(limits: ServiceLimits) -> type[GuardedH11Protocol]:
    """A :class:`GuardedH11Protocol` class enforcing ``limits``."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def listen(host: str, port: int, *, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port``; :class:`ConfigError` when it cannot be had.

    The socket is made with ``IPPROTO_TCP`` as its protocol: asyncio turns Nagle's
    algorithm off (``TCP_NODELAY``) only on connections of such a socket. With the
    protocol left 0 (``socket.create_server``), a response written in two parts (headers,
    then body) waited for the client's delayed ACK: 40 ms a request on a kept-alive
    connection.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as socket.create_server: IPv6 only
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock
    except OSError as exc:
        raise ConfigError(
            f"service.bind={host}:{port}: cannot listen: {exc.strerror or exc}"
        ) from exc


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    limits: ServiceLimits,
    log_level: str = "warning",
    log: Callable[[str], None] = lambda _msg: None,
) -> bool:
    """Serve ``app`` until SIGINT/SIGTERM; False when the application did not start.

    Raises :class:`ConfigError` when the address cannot be bound.
    """
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    log(f"listening on http://{shown}:{port}")
    config = uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        lifespan="on",
        proxy_headers=False,  # the application reads a trusted proxy's header itself
        log_level=log_level,
        timeout_keep_alive=limits.keep_alive,
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except SystemExit:  # uvicorn's way to say the lifespan startup failed
        return False
    finally:
        sock.close()
    return server.started
