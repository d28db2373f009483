"""``dsbf:PATH?capacity=N&error=E&leaf_bits=M&fanout=C&ratio=R`` — seed paper 003, local form.

A *dynamic splittable Bloom filter* is a tree. The root holds a location
hash that sends each URL to one of ``c0`` leaf Bloom filters (``m`` bits,
``k`` hashes each). When a leaf's estimated false-positive rate passes its
threshold it *splits*: it gets ``fanout`` children and a location hash of its
own, **different at every level** (the paper's point: reusing the root's
hash would send everything a node receives to one child). A Bloom filter
cannot list its members, so the split leaf keeps its bits and is queried
together with its children; new inserts go to the children.

Sizing follows the paper: a leaf holds ``u = m (ln 2)^2 / ln(1/f)`` URLs at
false-positive rate ``f`` with ``k = round(log2(1/f))`` hashes (its formulas
4 and 6), and the tree starts with ``c0 = ceil(capacity / u)`` leaves
(formula 5), so no split happens before ``capacity``.

The error bound. A URL is checked against every filter on its path, so its
false-positive probability is ``1 - Π(1 - f_node)`` over the path, not the
largest leaf's rate as the paper's formula 7 says. To keep the compound rate
within ``error`` after any number of splits, the leaves at depth ``d`` (the
initial ones are depth 1) split at ``f_d = error·(1 - r)·r^(d-1)`` with the
tightening ratio ``r`` (default ½; the sum over any path is below
``error``). ``ratio=1`` is the paper's rule, every leaf splitting at
``error``: the bound then holds until the first split only.

Hashes: the 128-bit fingerprint of the canonical URL gives the two 64-bit
halves of double hashing for the leaf bits; the location hash of level
``d`` is ``xxh3_64(fingerprint, seed=d) mod fanout``.

Storage: the tree lives in memory; with a ``PATH`` it is loaded at open and
written by :meth:`flush`/:meth:`close` to a temporary file that atomically
replaces ``PATH`` (one writer at a time, ``PATH.lock``; readers use
``?readonly=1``). The distributed form of the paper, with leaves in Valkey
and batches of 300 URLs per request, is the ``valkey`` backend's business.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import xxhash

from urlsieve.exceptions import ConfigError, StoreCorrupt
from urlsieve.fingerprint import fingerprint128
from urlsieve.seen._wholefile import WholeFileStore
from urlsieve.seen.base import StoreStats
from urlsieve.store.files import check_params, check_profile, pick
from urlsieve.url import FILTER, Profile

__all__ = ["DSBF", "DsbfStore", "leaf_capacity"]

MAGIC = b"URLSDSBF"
FORMAT_VERSION = 1
_LOC = xxhash.xxh3_64_intdigest
_MASK64 = (1 << 64) - 1


def leaf_capacity(bits: int, k: int, rate: float) -> int:
    """URLs a filter of ``bits`` bits and ``k`` hashes holds before its FP rate passes ``rate``."""
    return max(1, int(-bits / k * math.log1p(-(rate ** (1.0 / k)))))


class DSBF:
    """The tree itself, on 16-byte fingerprints (no URLs, no files)."""

    def __init__(
        self,
        *,
        capacity: int = 1_000_000,
        error: float = 0.01,
        leaf_bits: int = 1 << 20,
        fanout: int = 3,
        ratio: float = 0.5,
        max_height: int = 0,
    ) -> None:
        if capacity < 1:
            raise ConfigError(f"capacity={capacity}: must be at least 1")
        if not 0 < error < 1:
            raise ConfigError(f"error={error}: must be between 0 and 1 (e.g. 0.01)")
        if leaf_bits < 64:
            raise ConfigError(f"leaf_bits={leaf_bits}: a leaf needs at least 64 bits")
        if fanout < 2:
            raise ConfigError(f"fanout={fanout}: a split needs at least 2 children")
        if not 0 < ratio <= 1:
            raise ConfigError(f"ratio={ratio}: the tightening ratio must be in (0, 1]")
        self.capacity = capacity
        self.error = error
        self.leaf_bits = leaf_bits
        self.fanout = fanout
        self.ratio = ratio
        self.max_height = max_height  # 0: split without limit; 1: the paper's H = 1 (no split)
        self.first_rate = error * (1 - ratio) if ratio < 1 else error
        self.k = max(1, round(math.log2(1 / self.first_rate)))
        per_leaf = leaf_bits * math.log(2) ** 2 / math.log(1 / self.first_rate)  # formula 4
        self.initial_leaves = max(1, math.ceil(capacity / per_leaf))  # formula 5
        self._nbytes = (leaf_bits + 7) // 8
        # Node 0 is the root: a router only. Every other node owns a filter.
        self.depth: list[int] = [0]
        self.count: list[int] = [0]
        self.children: list[list[int] | None] = [None]
        self.bits: list[bytearray] = [bytearray()]
        self._limits: dict[int, int] = {}
        self.expected_fp = 0.0
        self.splits = 0
        self.children[0] = [self._new_node(1) for _ in range(self.initial_leaves)]

    def _new_node(self, depth: int) -> int:
        self.depth.append(depth)
        self.count.append(0)
        self.children.append(None)
        self.bits.append(bytearray(self._nbytes))
        return len(self.depth) - 1

    def threshold(self, depth: int) -> float:
        """The false-positive rate at which a leaf at ``depth`` splits."""
        return self.first_rate * self.ratio ** (depth - 1)

    def limit(self, depth: int) -> int:
        """How many URLs a leaf at ``depth`` takes before it splits."""
        lim = self._limits.get(depth)
        if lim is None:
            lim = self._limits[depth] = leaf_capacity(self.leaf_bits, self.k, self.threshold(depth))
        return lim

    def node_rate(self, node: int) -> float:
        """Estimated false-positive rate of a node's filter at its count."""
        return (-math.expm1(-self.k * self.count[node] / self.leaf_bits)) ** self.k

    def _positions(self, fp: bytes) -> list[int]:
        h1 = int.from_bytes(fp[:8], "big")
        h2 = int.from_bytes(fp[8:], "big") | 1
        m = self.leaf_bits
        return [((h1 + i * h2) & _MASK64) % m for i in range(self.k)]

    def _path(self, fp: bytes) -> list[int]:
        """Nodes with a filter from the root down to the leaf ``fp`` is routed to."""
        node, out = 0, []
        while True:
            kids = self.children[node]
            if kids is None:
                out.append(node)
                return out
            if node:
                out.append(node)  # a split leaf: still queried
            node = kids[_LOC(fp, seed=self.depth[node]) % len(kids)]

    def _has(self, node: int, positions: list[int]) -> bool:
        bits = self.bits[node]
        return all(bits[p >> 3] >> (p & 7) & 1 for p in positions)

    def __contains__(self, fp: bytes) -> bool:
        positions = self._positions(fp)
        return any(self._has(n, positions) for n in self._path(fp))

    def add(self, fp: bytes) -> bool:
        """Add a fingerprint; True when no filter on its path reported it."""
        positions = self._positions(fp)
        path = self._path(fp)
        if any(self._has(n, positions) for n in path):
            return False
        miss = 1.0
        for n in path:
            miss *= 1 - self.node_rate(n)
        self.expected_fp += 1 - miss  # chance this new URL would have been called seen
        leaf = path[-1]
        bits = self.bits[leaf]
        for p in positions:
            bits[p >> 3] |= 1 << (p & 7)
        self.count[leaf] += 1
        depth = self.depth[leaf]
        if self.count[leaf] >= self.limit(depth) and not 0 < self.max_height <= depth:
            self.children[leaf] = [self._new_node(self.depth[leaf] + 1) for _ in range(self.fanout)]
            self.splits += 1
        return True

    def __len__(self) -> int:
        return sum(self.count)

    def leaves(self) -> list[int]:
        return [n for n in range(1, len(self.depth)) if self.children[n] is None]

    def false_positive_rate(self) -> float:
        """Probability that a URL never added is reported seen (uniform routing)."""

        def walk(node: int, weight: float, miss: float) -> float:
            if node:
                miss *= 1 - self.node_rate(node)
            kids = self.children[node]
            if kids is None:
                return weight * (1 - miss)
            return sum(walk(kid, weight / len(kids), miss) for kid in kids)

        return walk(0, 1.0, 1.0)

    def height(self) -> int:
        return max(self.depth)

    def nbytes(self) -> int:
        return sum(len(b) for b in self.bits)

    # -- serialisation ----------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "error": self.error,
            "leaf_bits": self.leaf_bits,
            "fanout": self.fanout,
            "ratio": self.ratio,
            "max_height": self.max_height,
        }

    def dump(self, profile: str) -> bytes:
        meta = {
            "params": self.params(),
            "profile": profile,
            "depth": self.depth,
            "count": self.count,
            "children": self.children,
            "expected_fp": self.expected_fp,
            "splits": self.splits,
        }
        head = json.dumps(meta, separators=(",", ":")).encode()
        body = MAGIC + struct.pack("<II", FORMAT_VERSION, len(head)) + head
        body += b"".join(bytes(b) for b in self.bits[1:])
        return body + zlib.crc32(body).to_bytes(4, "little")

    @classmethod
    def load(cls, data: bytes, where: str) -> tuple[DSBF, str]:
        if len(data) < 20 or data[:8] != MAGIC:
            raise StoreCorrupt(f"{where}: not a urlsieve dsbf store (bad magic or too short)")
        if zlib.crc32(data[:-4]) != int.from_bytes(data[-4:], "little"):
            raise StoreCorrupt(
                f"{where}: checksum mismatch (truncated or damaged); restore it or delete it"
            )
        version, hlen = struct.unpack_from("<II", data, 8)
        if version != FORMAT_VERSION:
            raise StoreCorrupt(f"{where}: unsupported dsbf format {version}")
        try:
            meta = json.loads(data[16 : 16 + hlen])
            tree = cls(**meta["params"])
            tree.depth = [int(d) for d in meta["depth"]]
            tree.count = [int(c) for c in meta["count"]]
            tree.children = [None if c is None else [int(x) for x in c] for c in meta["children"]]
            tree.expected_fp = float(meta["expected_fp"])
            tree.splits = int(meta["splits"])
            profile = str(meta["profile"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreCorrupt(f"{where}: damaged dsbf metadata ({exc})") from exc
        nodes = len(tree.depth)
        blob = memoryview(data)[16 + hlen : -4]
        if not (len(tree.count) == len(tree.children) == nodes) or len(blob) != (
            (nodes - 1) * tree._nbytes
        ):
            raise StoreCorrupt(f"{where}: dsbf tree and filters disagree ({nodes} nodes)")
        n = tree._nbytes
        tree.bits = [bytearray()] + [bytearray(blob[i * n : (i + 1) * n]) for i in range(nodes - 1)]
        return tree, profile


class DsbfStore(WholeFileStore[DSBF]):
    """A seen store on a :class:`DSBF` (approximate: Bloom false positives)."""

    kind = "dsbf"

    def __init__(
        self,
        location: str = "",
        *,
        profile: Profile = FILTER,
        capacity: int | None = None,
        error: float | None = None,
        leaf_bits: int | None = None,
        fanout: int | None = None,
        ratio: float | None = None,
        readonly: bool = False,
    ) -> None:
        given = {
            "capacity": capacity,
            "error": error,
            "leaf_bits": leaf_bits,
            "fanout": fanout,
            "ratio": ratio,
        }
        super().__init__(location, profile, readonly, given)

    def _key(self, url: str) -> bytes:
        return fingerprint128(url, self._profile)

    def _new(self, given: Mapping[str, float | None]) -> DSBF:
        return DSBF(
            capacity=int(pick(given, "capacity", 1_000_000)),
            error=pick(given, "error", 0.01),
            leaf_bits=int(pick(given, "leaf_bits", 1 << 20)),
            fanout=int(pick(given, "fanout", 3)),
            ratio=pick(given, "ratio", 0.5),
        )

    def _decode(self, data: bytes, where: str, given: Mapping[str, float | None]) -> DSBF:
        tree, ident = DSBF.load(data, where)
        check_profile(ident, self._profile, where)
        check_params(where, given, tree.params())
        return tree

    def _encode(self) -> bytes:
        return self._table.dump(self._profile.ident)

    @property
    def tree(self) -> DSBF:
        return self._table

    def stats(self) -> StoreStats:
        t = self._table
        return StoreStats(
            backend="dsbf",
            profile=self._profile.ident,
            count=len(t),
            exact=False,
            bytes_used=t.nbytes(),
            capacity=t.capacity,
            fill_ratio=len(t) / t.capacity,
            false_positive_rate=t.false_positive_rate(),
            expected_false_positives=t.expected_fp,
            extra={
                **t.params(),
                "k": t.k,
                "initial_leaves": t.initial_leaves,
                "leaves": len(t.leaves()),
                "nodes": len(t.depth) - 1,
                "height": t.height(),
                "splits": t.splits,
                "path": str(self._path) if self._path else None,
            },
        )
