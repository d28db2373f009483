"""What every Valkey store kind shares: the stored configuration, batching, the protocol.

A store is a key namespace (``?prefix=``, default ``urlsieve``) on one server
or cluster. Its configuration (kind, canonical profile, sizes) is written once,
atomically (``SET NX``), to ``{prefix}:meta``; every later client reads it,
so all clients agree on the layout, and opening a store under another profile
or kind fails with a typed error instead of silently mixing fingerprints.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from urlsieve.exceptions import (
    ConfigError,
    ProfileMismatch,
    StoreClosed,
    StoreCorrupt,
    StoreUnavailable,
)
from urlsieve.seen.base import ClosingStore, StoreStats
from urlsieve.store.valkey.router import BatchInterrupted, Cmd, Router
from urlsieve.url import Profile

_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,128}")

__all__ = ["Decoder", "ValkeyStore"]

FORMAT = 1
Flags = npt.NDArray[np.bool_]
Decoder = Callable[[list[Any]], Flags]
Builder = Callable[[Any, int, int], tuple[list[Cmd], Decoder]]


class ValkeyStore(ClosingStore):
    """Base of the ``kind=`` stores; subclasses say how URLs become commands."""

    kind: ClassVar[str]
    #: Configuration keys a subclass stores in ``{prefix}:meta``.
    config_keys: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        router: Router,
        *,
        prefix: str,
        profile: Profile,
        batch: int,
        requested: Mapping[str, Any],
    ) -> None:
        if batch < 1:
            raise ConfigError(f"batch={batch}: must be at least 1 URL per request")
        if not _PREFIX.fullmatch(prefix):
            # Keys are "{prefix:…}" and "{prefix}:…": with no ":" (or brace) in a prefix, no
            # key of one store can be a key of another ("a" and "a:x0" shared "{a:x0}:n").
            raise ConfigError(
                f"prefix={prefix!r}: must be 1-128 letters, digits, '_', '-' or '.' "
                "(no ':' or braces: they would let two stores share keys)"
            )
        self._router = router
        self._prefix = prefix
        self._profile = profile
        self.batch = batch
        self._closed = False
        try:
            self.config = self._agree(requested)
            self._setup()
        except BaseException:
            router.close()
            raise

    # ------------------------------------------------------------ configuration

    @classmethod
    def defaults(cls, requested: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration a new store gets from the requested parameters."""
        raise NotImplementedError

    def _setup(self) -> None:
        """Derive working attributes from ``self.config``."""
        raise NotImplementedError

    @property
    def meta_key(self) -> str:
        return f"{{{self._prefix}}}:meta"

    def _agree(self, requested: Mapping[str, Any]) -> dict[str, Any]:
        fresh = {"format": FORMAT, "kind": self.kind, "profile": self._profile.ident}
        fresh.update(self.defaults(requested))
        key = self.meta_key
        created, stored = self._router.execute(
            [
                Cmd(key, ("SET", key, json.dumps(fresh, sort_keys=True), "NX")),
                Cmd(key, ("GET", key)),
            ],
            idempotent=True,  # SET NX twice is harmless: the second never writes
        )
        if created:
            return fresh
        try:
            config: dict[str, Any] = json.loads(stored)
        except (TypeError, ValueError) as exc:
            raise StoreCorrupt(f"{self._where()}: {key} is not urlsieve metadata") from exc
        if config.get("format") != FORMAT:
            raise StoreCorrupt(
                f"{self._where()}: {key} has format {config.get('format')!r}, expected {FORMAT}"
            )
        stored_kind = config.get("kind")
        if stored_kind != self.kind:
            raise ConfigError(
                f"{self._where()}: prefix {self._prefix!r} holds a kind={stored_kind} store,"
                f" not kind={self.kind}; open it with kind={stored_kind} or use another prefix"
            )
        if config.get("profile") != self._profile.ident:
            raise ProfileMismatch(
                f"{self._where()}: store written under profile {config.get('profile')!r},"
                f" opened with {self._profile.ident!r}; open it with that profile"
                " or use another prefix"
            )
        for name, value in requested.items():
            if value is not None and name in config and config[name] != value:
                raise ConfigError(
                    f"{self._where()}: store was created with {name}={config[name]},"
                    f" not {name}={value}; drop the parameter or use another prefix"
                )
        return config

    def _where(self) -> str:
        return f"{self._router.url} prefix {self._prefix!r}"

    # ------------------------------------------------------------ batching

    def _prepare(self, urls: list[str]) -> Any:
        """Fingerprints of every URL (raises InvalidURL before anything is sent)."""
        raise NotImplementedError

    def _add_cmds(self, prepared: Any, lo: int, hi: int) -> tuple[list[Cmd], Decoder]:
        raise NotImplementedError

    def _contains_cmds(self, prepared: Any, lo: int, hi: int) -> tuple[list[Cmd], Decoder]:
        raise NotImplementedError

    def _extra_cmds(self) -> list[Cmd]:
        """Commands to piggyback on the next write chunk (e.g. a pending counter)."""
        return []

    def _added(self, flags: Flags) -> None:
        """Called with each confirmed chunk of add flags."""

    def _batched(self, urls: Iterable[str], build: Builder, *, write: bool) -> list[bool]:
        self._check_open()
        items = list(urls)
        if not items:
            return []
        prepared = self._prepare(items)
        n = len(items)
        plan: list[tuple[int, int, Decoder, int]] = []

        def chunks() -> Iterator[Sequence[Cmd]]:
            for lo in range(0, n, self.batch):
                hi = min(n, lo + self.batch)
                cmds, decode = build(prepared, lo, hi)
                extra = self._extra_cmds() if write else []
                plan.append((lo, hi, decode, len(extra)))
                yield extra + cmds

        out: list[bool | None] = [None] * n
        with self._translated(out, write):
            for i, replies in enumerate(self._router.stream(chunks(), idempotent=not write)):
                lo, hi, decode, skip = plan[i]
                flags = decode(replies[skip:])
                if write:
                    self._added(flags)
                out[lo:hi] = flags.tolist()
        return out  # type: ignore[return-value]  # every slot filled

    @contextlib.contextmanager
    def _translated(self, out: list[bool | None], write: bool) -> Iterator[None]:
        """Name the store in server errors; a failed write carries the confirmed flags."""
        try:
            yield
        except BatchInterrupted:
            raise
        except StoreUnavailable as exc:
            if write:
                raise BatchInterrupted(f"{self._where()}: {exc}", out) from exc
            raise StoreUnavailable(f"{self._where()}: {exc}") from exc

    # ------------------------------------------------------------ SeenStore

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def prefix(self) -> str:
        return self._prefix

    def add(self, url: str) -> bool:
        return self._batched([url], self._add_cmds, write=True)[0]

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        return self._batched(urls, self._add_cmds, write=True)

    def __contains__(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        return self._batched([url], self._contains_cmds, write=False)[0]

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        return self._batched(urls, self._contains_cmds, write=False)

    def __len__(self) -> int:
        raise NotImplementedError

    def stats(self) -> StoreStats:
        raise NotImplementedError

    def flush(self) -> None:
        """Send what is pending (counters). Durability is the server's: see README, AOF."""
        self._check_open()
        extra = self._extra_cmds()
        if extra:
            self._router.execute(extra, idempotent=False)

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        except StoreUnavailable:
            pass  # closing must not fail on a dead server; the counter is an estimate
        finally:
            self._closed = True
            self._router.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"{self._where()}: store is closed")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._where()} {self.config}>"

    # ------------------------------------------------------------ helpers

    def _stats(self, **kwargs: Any) -> StoreStats:
        extra = dict(kwargs.pop("extra", {}))
        extra.update(
            kind=self.kind,
            server=self._router.where,
            cluster=self._router.is_cluster,
            prefix=self._prefix,
        )
        return StoreStats(backend="valkey", profile=self._profile.ident, extra=extra, **kwargs)


def group_by(keys: npt.NDArray[np.uint64]) -> list[npt.NDArray[np.intp]]:
    """Indices of ``keys`` grouped by value, each group in its original order."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    return np.split(order, bounds)


def flags_from_string(reply: Any, size: int) -> Flags:
    """Decode a script's ``b"0110"`` reply (one ASCII digit per URL)."""
    if not isinstance(reply, bytes) or len(reply) != size:
        raise StoreCorrupt(f"unexpected script reply {reply!r:.80}")
    flags: Flags = np.frombuffer(reply, dtype=np.uint8) == ord("1")
    return flags
