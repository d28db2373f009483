"""Near-duplicate index over 64-bit SimHashes: every key within ``k`` bits of a query.

Pigeonhole tables in the style of Manku, Jain & Das Sarma (WWW 2007): the 64
bits are cut into ``k + 1`` blocks; two fingerprints within ``k`` bits agree
exactly on at least one block, so one table per block (block value → keys)
finds every candidate, and a popcount of the XOR keeps the true ones. Exact:
no fingerprint within ``k`` bits is ever missed.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from urlsieve.exceptions import ConfigError
from urlsieve.seen.base import parse_spec

__all__ = ["MemoryIndex", "NearDupIndex", "open_index"]

MAX_K = 8
MAX_KEY = 8192  # bytes of UTF-8


@runtime_checkable
class NearDupIndex(Protocol):
    def add(self, key: str, fp: int) -> None: ...

    def query(self, fp: int, k: int | None = None) -> list[tuple[str, int]]: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...


def _blocks(k: int) -> list[tuple[int, int]]:
    """(shift, mask) of ``k + 1`` near-equal blocks covering 64 bits."""
    count = k + 1
    out, start = [], 0
    for i in range(count):
        width = 64 // count + (1 if i < 64 % count else 0)
        out.append((start, (1 << width) - 1))
        start += width
    return out


class MemoryIndex:
    """In-memory index; ``k`` is the largest distance a query may ask for."""

    def __init__(self, k: int = 3) -> None:
        if not 0 <= k <= MAX_K:
            raise ConfigError(f"near-duplicate index: k must be 0..{MAX_K}, not {k}")
        self.k = k
        self._blocks = _blocks(k)
        self._tables: list[dict[int, list[int]]] = [{} for _ in self._blocks]
        self._keys: list[str] = []
        self._fps: list[int] = []

    def add(self, key: str, fp: int) -> None:
        if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY:
            raise ValueError(f"near-duplicate index key over {MAX_KEY} bytes")
        fp &= 0xFFFF_FFFF_FFFF_FFFF
        doc = len(self._keys)
        self._keys.append(key)
        self._fps.append(fp)
        for table, (shift, mask) in zip(self._tables, self._blocks, strict=True):
            table.setdefault((fp >> shift) & mask, []).append(doc)

    def query(self, fp: int, k: int | None = None) -> list[tuple[str, int]]:
        k = self.k if k is None else k
        if not 0 <= k <= self.k:
            raise ValueError(f"query distance {k} is outside 0..{self.k} (the index's k)")
        fp &= 0xFFFF_FFFF_FFFF_FFFF
        found: dict[int, int] = {}
        fps = self._fps
        for table, (shift, mask) in zip(self._tables, self._blocks, strict=True):
            for doc in table.get((fp >> shift) & mask, ()):
                if doc not in found:
                    distance = (fps[doc] ^ fp).bit_count()
                    if distance <= k:
                        found[doc] = distance
        return sorted(
            ((self._keys[d], dist) for d, dist in found.items()), key=lambda x: (x[1], x[0])
        )

    def __len__(self) -> int:
        return len(self._keys)

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_index(spec: str, *, k: int = 3) -> MemoryIndex:
    """A near-duplicate index from a spec (``memory:``)."""
    parsed = parse_spec(spec)
    if parsed.backend != "memory":
        raise ConfigError(f"near-duplicate index spec {spec!r}: unknown backend (memory)")
    return MemoryIndex(k=int(parsed.params.get("k", k)))
