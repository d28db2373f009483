"""Talking to Valkey/Redis: one node or a cluster, pipelined, with typed errors.

Every store command names the key it routes by. :class:`Router` groups a
list of commands per node (one node when standalone, the slot owner in a
cluster), writes each group down one connection before reading any reply,
and can keep the next chunk in flight while the previous replies are read
(``stream``), so client and server work at the same time.

Retries. The driver's own retries are off (they would resend a write whose
reply was lost, and a lost test-and-set reply resent reports "seen" for a URL
nobody was told was new). This module retries only what is safe:

- every command whose reply proves it did not run: ``NOSCRIPT`` (the script
  is loaded, then resent), ``LOADING``, ``TRYAGAIN``, ``CLUSTERDOWN``,
  ``MOVED``/``ASK`` and, in a cluster, ``READONLY`` (the topology is
  refreshed first), with exponential backoff;
- a whole read after a connection error or timeout (``idempotent=True``).

A write that loses its connection raises :class:`BatchInterrupted` (a
:class:`~urlsieve.exceptions.StoreUnavailable`) carrying the results the
server did confirm; ``OOM`` and ``READONLY`` on a standalone server raise
``StoreUnavailable`` at once. Nothing is reported unless its reply arrived.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import valkey
from valkey import exceptions as vx
from valkey.cluster import ValkeyCluster
from valkey.connection import parse_url

from urlsieve.exceptions import ConfigError, StoreCorrupt, StoreError, StoreUnavailable
from urlsieve.store.valkey import call
from urlsieve.store.valkey.resp import commands

__all__ = ["BatchInterrupted", "Cmd", "Router", "Script"]

#: Replies that prove a command was not executed, so it may be sent again.
_REDO_CODES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")


class BatchInterrupted(StoreUnavailable):
    """A batch write lost its server midway.

    ``confirmed`` has one entry per URL of the batch: the flag the server
    confirmed, or ``None`` where the outcome is unknown (the command may or
    may not have run; re-adding such a URL can report it as seen).
    """

    def __init__(self, message: str, confirmed: list[bool | None]) -> None:
        super().__init__(message)
        self.confirmed = confirmed


@dataclass(frozen=True)
class Script:
    """A Lua script run by SHA (loaded on demand on each node that lacks it)."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())

    def call(self, key: str, *args: Any) -> Cmd:
        """A command that runs the script with one key (all keys it touches share its slot)."""
        return Cmd(key, ("EVALSHA", self.sha, 1, key, *args), self)

    def calls(
        self, keys: Sequence[str], head: Sequence[Any], parts: Sequence[Any], sizes: Sequence[int]
    ) -> list[Cmd]:
        """One call per key: ``head`` then its ``sizes[i]`` rows of ``parts`` (see ``resp``)."""
        heads = [("EVALSHA", self.sha, 1, key, *head) for key in keys]
        packed = commands(heads, parts, sizes)
        return [Cmd(key, ("EVALSHA",), self, p) for key, p in zip(keys, packed, strict=True)]


@dataclass(frozen=True, slots=True)
class Cmd:
    """One command and the key that routes it (``packed``: its RESP bytes, when pre-encoded)."""

    key: str
    args: tuple[Any, ...]
    script: Script | None = None
    packed: bytes | None = None
    #: replies the packed bytes produce (several commands on one slot, e.g. MULTI … EXEC);
    #: the result is then their list, or the first error among them
    replies: int = 1

    @classmethod
    def many(
        cls, name: str, keys: Sequence[str], parts: Sequence[Any], sizes: Sequence[int]
    ) -> list[Cmd]:
        """``name key <rows>`` per key, the integer rows encoded in bulk (see ``resp``)."""
        packed = commands([(name, key) for key in keys], parts, sizes)
        return [cls(key, (name,), None, p) for key, p in zip(keys, packed, strict=True)]


def _code(error: Exception) -> str:
    """The error code of a reply: ``MOVED``, ``NOSCRIPT``…, as the server spelled it."""
    if isinstance(error, vx.NoScriptError):
        return "NOSCRIPT"
    if isinstance(error, vx.BusyLoadingError):
        return "LOADING"
    if isinstance(error, vx.OutOfMemoryError):
        return "OOM"
    if isinstance(error, vx.ReadOnlyError):
        return "READONLY"
    if isinstance(error, vx.MovedError):
        return "MOVED"
    if isinstance(error, vx.AskError):
        return "ASK"
    if isinstance(error, vx.TryAgainError):
        return "TRYAGAIN"
    if isinstance(error, vx.ClusterDownError):
        return "CLUSTERDOWN"
    text = str(error)
    return text.split(" ", 1)[0] if text else ""


class _Node:
    """One server: a client whose pool lends the connection a group of commands goes down."""

    def __init__(self, name: str, client: valkey.Valkey) -> None:
        self.name = name
        self.client = client


class Router:
    """Sends commands to the right node of a standalone server or a cluster."""

    def __init__(self, url: str, *, timeout: float, retries: int) -> None:
        self.url = url
        self.retries = retries
        self._timeout = timeout
        self._nodes: dict[str, _Node] = {}
        self._cluster: Any = None  # ValkeyCluster (untyped in valkey-py)
        try:
            options = parse_url(url)
        except ValueError as exc:
            raise ConfigError(f"bad server URL {url!r}: {exc}") from exc
        self.where = (
            options.get("path") or f"{options.get('host', 'localhost')}:{options.get('port', 6379)}"
        )
        self._options = options
        common: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": None,
        }
        self._single = self._call_boundary(lambda: valkey.Valkey.from_url(url, **common), "connect")
        info = self._call_boundary(lambda: self._single.info("cluster"), "INFO cluster")
        if int(info.get("cluster_enabled", 0)):
            if int(options.get("db") or 0) != 0:
                raise ConfigError(f"{url!r}: a cluster has only database 0; drop the /db part")
            cluster_kwargs = {
                k: options[k]
                for k in ("username", "password", "ssl_cert_reqs", "ssl_ca_certs")
                if k in options
            }
            if options.get("connection_class") is valkey.connection.SSLConnection:
                cluster_kwargs["ssl"] = True
            self._cluster = self._call_boundary(
                lambda: ValkeyCluster(
                    host=options["host"],
                    port=options["port"],
                    cluster_error_retry_attempts=0,
                    socket_timeout=timeout,
                    socket_connect_timeout=timeout,
                    **cluster_kwargs,
                ),
                "cluster discovery",
            )
            self._single.close()
        else:
            self._nodes[self.where] = _Node(self.where, self._single)

    # ------------------------------------------------------------------ topology

    @property
    def is_cluster(self) -> bool:
        return self._cluster is not None

    def _node_for(self, key: str) -> _Node:
        if self._cluster is None:
            return self._nodes[self.where]
        try:
            slot = self._cluster.keyslot(key)
            node = self._cluster.nodes_manager.get_node_from_slot(slot)
        except (vx.SlotNotCoveredError, vx.ValkeyClusterException) as exc:
            raise StoreUnavailable(f"cluster at {self.where}: no node serves key {key!r}") from exc
        found = self._nodes.get(node.name)
        if found is None or found.client is not node.valkey_connection:
            found = _Node(node.name, self._cluster.get_valkey_connection(node))
            self._nodes[node.name] = found
        return found

    def _refresh(self) -> None:
        if self._cluster is not None:
            # if the cluster is still down, the next send fails with a typed error
            with contextlib.suppress(vx.ValkeyError, OSError):
                self._cluster.nodes_manager.initialize()

    def primaries(self) -> list[_Node]:
        """Every primary (for whole-server questions: INFO, SCRIPT LOAD)."""
        if self._cluster is None:
            return [self._nodes[self.where]]
        out = []
        for node in self._cluster.get_primaries():
            out.append(_Node(node.name, self._cluster.get_valkey_connection(node)))
        return out

    # ------------------------------------------------------------------ sending

    def _call_boundary(self, fn: Any, what: str) -> Any:
        return call(fn, where=self.where, doing=what)

    def execute(self, cmds: Sequence[Cmd], *, idempotent: bool) -> list[Any]:
        """Run ``cmds`` (pipelined per node); the replies in order."""
        out: list[Any] = []
        for chunk in self.stream([cmds], idempotent=idempotent):
            out.extend(chunk)
        return out

    def stream(self, chunks: Iterable[Sequence[Cmd]], *, idempotent: bool) -> Iterator[list[Any]]:
        """Run chunks of commands, the next chunk in flight while the last one's replies are read.

        Yields each chunk's replies in order. A chunk is built (``chunks`` is
        pulled) only after the chunk before it has been sent.
        """
        attempt = 0
        done = 0
        pending: list[Sequence[Cmd]] = []
        source = iter(chunks)
        while True:
            try:
                for replies in self._stream_once(source, pending, done):
                    done += 1
                    attempt = 0
                    yield replies
                return
            except _Retryable as exc:
                attempt += 1
                if not idempotent or attempt > self.retries:
                    raise exc.error from exc.cause
                self._refresh()
                time.sleep(_backoff(attempt))
                # resend everything not yet yielded (reads only: idempotent)
                pending = exc.unanswered

    def _stream_once(
        self, source: Iterator[Sequence[Cmd]], resend: list[Sequence[Cmd]], done: int
    ) -> Iterator[list[Any]]:
        conns: dict[str, tuple[_Node, Any]] = {}
        inflight: list[tuple[Sequence[Cmd], list[tuple[str, int]]]] = []
        queue = list(resend)
        try:
            while True:
                chunk = queue.pop(0) if queue else next(source, None)
                if chunk is not None:
                    order = self._route(chunk)
                    inflight.append((chunk, order))  # before any byte goes out
                    self._send(chunk, order, conns)
                if inflight and (chunk is None or len(inflight) > 1):
                    sent, order = inflight.pop(0)
                    yield self._finish(sent, self._read(sent, order, conns))
                if chunk is None and not inflight:
                    return
        except (vx.ConnectionError, vx.TimeoutError, OSError) as exc:
            for node, conn in conns.values():
                conn.disconnect()
                node.client.connection_pool.release(conn)
            conns.clear()
            unanswered = [c for c, _ in inflight]
            raise _Retryable(
                StoreUnavailable(
                    f"server {', '.join(sorted({n for n, _ in _names(inflight)})) or self.where}"
                    f" lost: {exc} ({done} chunk(s) confirmed before)"
                ),
                exc,
                unanswered,
            ) from exc
        finally:
            for node, conn in conns.values():
                node.client.connection_pool.release(conn)

    def _route(self, chunk: Sequence[Cmd]) -> list[tuple[str, int]]:
        """(node name, command index) in the order replies will arrive."""
        groups: dict[str, list[int]] = {}
        for i, cmd in enumerate(chunk):
            groups.setdefault(self._node_for(cmd.key).name, []).append(i)
        return [(name, i) for name, idx in groups.items() for i in idx]

    def _send(
        self,
        chunk: Sequence[Cmd],
        order: list[tuple[str, int]],
        conns: dict[str, tuple[_Node, Any]],
    ) -> None:
        groups: dict[str, list[int]] = {}
        for name, i in order:
            groups.setdefault(name, []).append(i)
        for name, idx in groups.items():
            if name not in conns:
                node = self._nodes[name]
                conns[name] = (node, node.client.connection_pool.get_connection("EVALSHA"))
            conn = conns[name][1]
            packed: list[bytes] = []
            for i in idx:
                cmd = chunk[i]
                packed.extend(
                    [cmd.packed] if cmd.packed is not None else conn.pack_command(*cmd.args)
                )
            conn.send_packed_command([b"".join(packed)], check_health=False)

    def _read(
        self,
        chunk: Sequence[Cmd],
        order: list[tuple[str, int]],
        conns: dict[str, tuple[_Node, Any]],
    ) -> list[Any]:
        replies: list[Any] = [None] * len(order)
        for name, i in order:
            conn = conns[name][1]
            group = []
            for _ in range(chunk[i].replies):
                try:
                    group.append(conn.read_response(disconnect_on_error=False))
                except vx.ResponseError as exc:
                    group.append(exc)
            errors = [r for r in group if isinstance(r, Exception)]
            replies[i] = errors[0] if errors else group[0] if len(group) == 1 else group
        return replies

    def _finish(self, chunk: Sequence[Cmd], replies: list[Any]) -> list[Any]:
        """Replace error replies by the result of a safe resend, or raise a typed error."""
        for attempt in range(1, self.retries + 3):
            redo = [i for i, r in enumerate(replies) if isinstance(r, Exception)]
            if not redo:
                return replies
            for i in redo:
                self._classify(chunk[i], replies[i], attempt)
            if any(_code(replies[i]) != "NOSCRIPT" for i in redo):
                self._refresh()
                time.sleep(_backoff(attempt))
            again = [chunk[i] for i in redo]
            for i in redo:
                if chunk[i].script is not None and _code(replies[i]) == "NOSCRIPT":
                    self._load(chunk[i])
            try:
                results = self._plain(again)
            except (vx.ConnectionError, vx.TimeoutError, OSError) as exc:
                raise StoreUnavailable(f"server {self.where} lost while resending: {exc}") from exc
            for i, r in zip(redo, results, strict=True):
                replies[i] = r
        bad = [r for r in replies if isinstance(r, Exception)]
        if not bad:
            return replies
        raise StoreUnavailable(
            f"{self.where}: still refused after {self.retries + 2} resends: {bad[0]}"
        ) from bad[0]

    def _plain(self, cmds: Sequence[Cmd]) -> list[Any]:
        conns: dict[str, tuple[_Node, Any]] = {}
        try:
            order = self._route(cmds)
            self._send(cmds, order, conns)
            return self._read(cmds, order, conns)
        except BaseException:
            for _node, conn in conns.values():
                conn.disconnect()
            raise
        finally:
            for node, conn in conns.values():
                node.client.connection_pool.release(conn)

    def _load(self, cmd: Cmd) -> None:
        script = cmd.script
        if script is None:
            return
        node = self._node_for(cmd.key)
        self._call_boundary(lambda: node.client.script_load(script.source), "SCRIPT LOAD")

    def _classify(self, cmd: Cmd, error: Exception, attempt: int) -> None:
        """Raise the typed error for a refusal that must not be retried."""
        code = _code(error)
        where = f"{self._node_for(cmd.key).name} (key {cmd.key!r}, {cmd.args[0]})"
        if code == "NOSCRIPT" or code in _REDO_CODES:
            return
        if code == "READONLY" and self.is_cluster:
            return  # a failover: the refreshed topology names the new primary
        if code == "OOM":
            raise StoreUnavailable(
                f"{where}: server out of memory (maxmemory reached), nothing was written;"
                " raise maxmemory or use a policy that does not evict urlsieve keys"
            ) from error
        if code == "READONLY":
            raise StoreUnavailable(
                f"{where}: server is a read-only replica, nothing was written;"
                " point the spec at the primary"
            ) from error
        if code == "WRONGTYPE":
            raise StoreCorrupt(
                f"{where}: key holds another type of value: the key prefix collides with"
                " other data; choose another ?prefix="
            ) from error
        raise StoreError(f"{where}: refused: {error}") from error

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
        for node in self._nodes.values():
            node.client.close()  # type: ignore[no-untyped-call]
        self._nodes.clear()


class _Retryable(Exception):
    def __init__(
        self, error: StoreUnavailable, cause: BaseException, unanswered: list[Sequence[Cmd]]
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.cause = cause
        self.unanswered = unanswered


def _names(inflight: list[tuple[Sequence[Cmd], list[tuple[str, int]]]]) -> list[tuple[str, int]]:
    return [pair for _, order in inflight for pair in order]


def _backoff(attempt: int) -> float:
    """Exponential backoff with jitter: ~50 ms, 100 ms, 200 ms … capped at 2 s."""
    base: float = min(2.0, 0.05 * 2 ** (attempt - 1))
    return base * (0.5 + random.random() / 2)
