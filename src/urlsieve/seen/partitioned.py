"""``partitioned:DIR?partitions=16`` — an ``exact:`` store split by domain, one lock per part.

Seed 004 §3.3: crawler threads each own a set of domains, "so thread *i*
writing its data need not lock the whole database, only its part". Here a
URL's partition is chosen by its *registrable domain* (``news.example.co.uk``
→ ``example.co.uk``, by the Public Suffix List; an IP address is its own
domain), hashed with xxh3 modulo the number of partitions. Every partition
is an ordinary ``exact:`` file (``DIR/part-0007.exact``) with its own
``flock``, so writers that own disjoint domains never wait on each other,
while any process may read (and write) every partition.

:meth:`PartitionedStore.owner` tells a crawl which of its ``writers`` owns a
URL's domain (partition ``p`` belongs to writer ``p % writers``): route each
URL to its owner and no two writers ever share a lock. A writer that adds a
URL it does not own is still correct — it only waits for that part's lock.

The directory holds a ``PARTITIONS`` manifest (format, partition count,
profile), created once with an atomic link; a store opened with another
partition count or profile fails with :class:`~urlsieve.exceptions.ConfigError`
or :class:`~urlsieve.exceptions.ProfileMismatch` instead of scattering URLs
over the wrong files.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import xxhash

from urlsieve.exceptions import (
    ConfigError,
    ProfileMismatch,
    StoreClosed,
    StoreCorrupt,
    StoreReadOnly,
)
from urlsieve.seen.base import ClosingStore, StoreStats
from urlsieve.seen.exact import ExactStore
from urlsieve.store.files import os_error
from urlsieve.url import FILTER, Profile, canonicalize
from urlsieve.url.expressions import suffix_list

__all__ = ["PartitionedStore", "domain_key"]

MANIFEST = "PARTITIONS"
FORMAT = "urlsieve-partitioned/1"
MAX_PARTITIONS = 4096
DEFAULT_PARTITIONS = 16


SMALL_GROUP = 8  # a partition's share of a batch up to this size is added key by key
HOST_CACHE = 1 << 16  # hosts whose partition is remembered (cleared when full)
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
xxh3_64 = xxhash.xxh3_64_intdigest


def _host_of(canonical: str) -> str:
    """The host of a canonical URL (``scheme://host[:port]/…``; IPv6 in brackets)."""
    netloc = canonical[canonical.index("://") + 3 :].partition("/")[0]
    if netloc.startswith("["):
        return netloc[: netloc.index("]") + 1]
    return netloc.partition(":")[0]


def _is_ip(host: str) -> bool:
    return host.startswith("[") or _IPV4.fullmatch(host) is not None


def domain_key(host: str, *, is_ip: bool = False) -> str:
    """The registrable domain a host belongs to (itself for an IP or a bare public suffix)."""
    if is_ip:
        return host
    return suffix_list().privatesuffix(host) or host


class PartitionedStore(ClosingStore):
    """Exact, persistent, shared by processes; one ``exact:`` file and lock per partition."""

    NAME = "partitioned"

    def __init__(
        self,
        location: str,
        *,
        profile: Profile = FILTER,
        partitions: int | None = None,
        capacity: int | None = None,
        readonly: bool = False,
    ) -> None:
        if not location:
            raise ConfigError("partitioned: needs a directory, e.g. partitioned:/var/lib/seen.d")
        if partitions is not None and not 1 <= partitions <= MAX_PARTITIONS:
            raise ConfigError(
                f"partitioned:{location}: partitions must be 1..{MAX_PARTITIONS}, not {partitions}"
            )
        if capacity is not None and capacity < 1:
            raise ConfigError(f"partitioned:{location}: capacity must be at least 1")
        self._dir = Path(location)
        self._profile = profile
        self._readonly = readonly
        self._closed = False
        self.partitions = self._manifest(partitions)
        self._capacity = None if capacity is None else max(1, capacity // self.partitions)
        self._parts: list[ExactStore | None] = [None] * self.partitions
        self._host_parts: dict[str, int] = {}

    # ---------------------------------------------------------------- manifest
    def _manifest(self, partitions: int | None) -> int:
        path = self._dir / MANIFEST
        try:
            if not path.exists():
                if self._readonly:
                    raise ConfigError(f"{self._dir}: no partitioned store here (no {MANIFEST})")
                self._dir.mkdir(parents=True, exist_ok=True)
                wanted = partitions or DEFAULT_PARTITIONS
                body = {"format": FORMAT, "partitions": wanted, "profile": self._profile.ident}
                tmp = self._dir / f".{MANIFEST}.{os.getpid()}"
                tmp.write_text(json.dumps(body) + "\n")
                try:
                    os.link(tmp, path)  # atomic: the first creator wins, the others read it
                except FileExistsError:
                    pass
                finally:
                    tmp.unlink()
            raw = path.read_bytes()[:4096]
        except OSError as exc:
            raise os_error(exc, path, "opening the partition manifest") from exc
        try:
            data = json.loads(raw)
            found, ident = int(data["partitions"]), str(data["profile"])
            if data.get("format") != FORMAT or not 1 <= found <= MAX_PARTITIONS:
                raise ValueError("unknown format or partition count")
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorrupt(
                f"{path}: not a partitioned-store manifest ({exc}); "
                "restore it, or remove the directory to start empty"
            ) from None
        if partitions is not None and partitions != found:
            raise ConfigError(
                f"{self._dir} has {found} partitions, not {partitions}: "
                f"open it with partitions={found} (or without the parameter)"
            )
        if ident != self._profile.ident:
            raise ProfileMismatch(
                f"{self._dir} was written under profile {ident}, not {self._profile.ident}"
            )
        return found

    def _part(self, index: int) -> ExactStore | None:
        """Partition ``index``, opened on first use; None when read-only and never written."""
        if self._closed:
            raise StoreClosed(f"partitioned:{self._dir} is closed")
        part = self._parts[index]
        if part is None:
            path = self._dir / f"part-{index:04d}.exact"
            if self._readonly and not path.exists():
                return None
            part = self._parts[index] = ExactStore(
                str(path), profile=self._profile, capacity=self._capacity, readonly=self._readonly
            )
        return part

    # ------------------------------------------------------------- partitioning
    @property
    def profile(self) -> Profile:
        return self._profile

    def partition(self, url: str) -> int:
        """The partition of ``url``'s registrable domain (raises ``InvalidURL``)."""
        return self._partition_of_host(_host_of(canonicalize(url, self._profile)))

    def _partition_of_host(self, host: str) -> int:
        part = self._host_parts.get(host)
        if part is None:
            if len(self._host_parts) >= HOST_CACHE:
                self._host_parts.clear()
            domain = domain_key(host, is_ip=_is_ip(host))
            part = xxhash.xxh3_64_intdigest(domain.encode("ascii")) % self.partitions
            self._host_parts[host] = part
        return part

    def owner(self, url: str, writers: int) -> int:
        """Which of ``writers`` writer processes owns ``url``'s domain (partition mod writers)."""
        if writers < 1:
            raise ValueError("writers must be at least 1")
        return self.partition(url) % writers

    def _keys(self, urls: Iterable[str]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint64]]:
        canonical = [canonicalize(u, self._profile) for u in urls]  # all or nothing: may raise
        parts = [self._partition_of_host(_host_of(c)) for c in canonical]
        keys = [xxh3_64(c.encode("ascii")) for c in canonical]
        return np.array(parts, dtype=np.intp), np.array(keys, dtype=np.uint64)

    def _each_part(self, urls: Iterable[str], add: bool) -> list[bool]:
        parts, keys = self._keys(urls)
        out = np.zeros(len(keys), dtype=bool)
        for index in np.unique(parts).tolist():
            where = np.flatnonzero(parts == index)
            store = self._part(index)
            if store is None:  # read-only, and nothing was ever written to this partition
                if add:
                    raise StoreReadOnly(f"partitioned:{self._dir} is open read-only")
                continue
            if len(where) <= SMALL_GROUP:  # the batch path's fixed cost is ~100 µs
                one = store.add_fingerprint if add else store.contains_fingerprint
                for i in where.tolist():
                    out[i] = one(int(keys[i]))
            elif add:
                out[where] = store.add_fingerprints(keys[where])
            else:
                out[where] = store.contains_fingerprints(keys[where])
        flags: list[bool] = out.tolist()
        return flags

    # -------------------------------------------------------------- operations
    def add(self, url: str) -> bool:
        return self._each_part((url,), add=True)[0]

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        return self._each_part(urls, add=True)

    def __contains__(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        return self._each_part((url,), add=False)[0]

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        return self._each_part(urls, add=False)

    def _all_parts(self) -> list[ExactStore]:
        parts = []
        for i in range(self.partitions):
            if self._parts[i] is not None or (self._dir / f"part-{i:04d}.exact").exists():
                part = self._part(i)
                if part is not None:
                    parts.append(part)
        return parts

    def __len__(self) -> int:
        return sum(len(p) for p in self._all_parts())

    def stats(self) -> StoreStats:
        parts = [p.stats() for p in self._all_parts()]
        count = sum(s.count for s in parts)
        return StoreStats(
            backend=self.NAME,
            profile=self._profile.ident,
            count=count,
            exact=True,
            bytes_used=sum(s.bytes_used for s in parts),
            extra={
                "partitions": self.partitions,
                "partitions_in_use": len(parts),
                "expected_fingerprint_collisions": sum(
                    float(s.extra.get("expected_fingerprint_collisions", 0.0)) for s in parts
                ),
            },
        )

    def flush(self) -> None:
        for part in self._parts:
            if part is not None:
                part.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for part in self._parts:
            if part is not None:
                part.close()

    def __repr__(self) -> str:
        return f"PartitionedStore({str(self._dir)!r}, partitions={self.partitions})"
