"""``memory:`` — an exact in-process store: a Python set of 64-bit fingerprints.

The reference backend of the contract tests, and the right choice for a
crawl that fits in one process and need not survive it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from urlsieve.exceptions import StoreClosed
from urlsieve.fingerprint import fingerprint_one64, key_function
from urlsieve.seen._single import KIND_MEMORY, SeenBase, bind_key
from urlsieve.seen.base import ClosingStore, StoreStats
from urlsieve.url import FILTER, Profile

__all__ = ["MemoryStore"]


def _no_key(url: str) -> None:
    """No compiled key: every URL goes to the reference fingerprint."""


class MemoryStore(SeenBase, ClosingStore):
    """Exact, in-memory, not shared between processes.

    ``add`` and ``in`` are one compiled call (the key and the set's lookup, see
    :mod:`urlsieve.seen._single`); ``_add_slow`` and ``_contains_slow`` are their reference
    and take what the compiled call leaves."""

    def __init__(self, location: str = "", *, profile: Profile = FILTER) -> None:
        self._profile = profile
        self._set: set[int] | None = set()
        self._fp = fingerprint_one64(profile)
        # the compiled key of a str (None off the compiled path): no Python frame
        self._key = key_function(profile, 64) or _no_key
        key = bind_key(profile)
        if key is not None:
            self._seen_bind(key, KIND_MEMORY, self._set)

    @property
    def _seen(self) -> set[int]:
        if self._set is None:
            raise StoreClosed("memory store: closed (its URLs are gone); open a new one")
        return self._set

    @property
    def profile(self) -> Profile:
        return self._profile

    def _add_slow(self, url: str) -> bool:
        seen = self._set
        fp = self._key(url) if type(url) is str else None
        if fp is None:
            fp = self._fp(url)
        if seen is None:
            seen = self._seen  # raises StoreClosed
        if fp in seen:
            return False
        seen.add(fp)
        return True

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        one = self._fp
        fps = [one(u) for u in urls]  # all valid before any is added
        out = []
        seen = self._seen
        for fp in fps:
            new = fp not in seen
            if new:
                seen.add(fp)
            out.append(new)
        return out

    def _contains_slow(self, url: object) -> bool:
        seen = self._seen
        if type(url) is str:
            fp = self._key(url)
            return (self._fp(url) if fp is None else fp) in seen
        return isinstance(url, str) and self._fp(url) in seen

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        seen, one = self._seen, self._fp
        return [one(u) in seen for u in urls]

    def __len__(self) -> int:
        return len(self._seen)

    def stats(self) -> StoreStats:
        return StoreStats(
            backend="memory",
            profile=self._profile.ident,
            count=len(self._seen),
            exact=True,
            bytes_used=sys.getsizeof(self._seen) + 32 * len(self._seen),
        )

    def flush(self) -> None:
        """Nothing to do: the store lives and dies with the process."""
        _ = self._seen

    def close(self) -> None:
        self._seen_bind(None)
        self._set = None
