"""``kind=dsbf``: seed 003's dynamic splittable Bloom filter, leaves in Valkey.

The tree (Yuan, Yang, Liu 2016): the root's *location hash* sends each URL to
one of ``c`` leaf Bloom filters of ``m`` bits and ``k`` hashes each, ``c``
chosen so the leaves hold ``capacity`` URLs at ``error`` (f_max). When a
leaf's estimated false-positive rate ``(1 - e^(-k·n/m))^k`` passes f_max it
splits into ``fanout`` children with a location hash of its own level (each
level's hash differs). A Bloom filter cannot list its members, so the old
leaf is kept, frozen, and queried together with the path below it; new
inserts go to the children.

In Valkey: leaf ``P`` (a path such as ``2.0.1``) is the string
``{prefix:d<P>}``, with its insert count ``{prefix:d<P>}:n`` and, once split,
its seal ``{prefix:d<P>}:s`` in the same slot. An insert is one transaction
per leaf and batch, ``MULTI; GET seal; BITFIELD SET …; EXEC``: an atomic
test-and-set that also tells whether the leaf was sealed when it ran. If it
was (the client's copy of the tree was stale), the old bits answer as a
lookup in the sealed leaf, which every client queries anyway: a URL found
there is not new, the others go on to the children (the stale batch's bits
stay in the sealed leaf: at most one batch per client and split, and
``stats()`` estimates false positives from the bits actually set). A URL is therefore
new-tested in exactly one unsealed leaf, atomically, so two clients adding
the same URL see one "new", however many race a split. After the insert the
client adds the confirmed new URLs to the leaf's count and seals the leaf
when the count passes the f_max point; the seal is the truth about the
tree's shape, and ``{prefix}:tree`` (the set of split leaves) is the index
clients read and re-read when they meet a seal. Lookups read the bits
before the seal (``BITFIELD_RO`` then ``GET``), so a leaf sealed in between
sends the lookup on down rather than missing a URL added below it.

Compared with the seed paper: its batches of 300 become pipelined batches of
``batch`` URLs; its "rehash the old leaf's elements into the children" is
impossible for a Bloom filter and replaced by the kept leaf
(docs/architecture.md, "Where it came from").
The false-positive rate of a URL is ``1 - Π(1 - f_node)`` over its path, so a
deep tree's compound rate exceeds f_max; ``stats()`` reports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from urlsieve.exceptions import ConfigError, StoreCorrupt
from urlsieve.seen.base import StoreStats
from urlsieve.seen.valkey._store import ValkeyStore
from urlsieve.seen.valkey.bloom import expected_false_positives, hash_pairs, positions
from urlsieve.store.valkey.resp import commands, constant
from urlsieve.store.valkey.router import Cmd

_SET, _GET, _ONE = constant("SET", "u1"), constant("GET", "u1"), constant(1)

__all__ = ["ValkeyDsbfStore"]

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"


def _pack(*args: str) -> bytes:
    return commands([args], (), [0])[0]


def _bits_and_seal(reply: Any, size: int, node: str) -> tuple[npt.NDArray[np.uint8], bool]:
    """(old bits, sealed?) from ``[QUEUED…, [seal, bits]]`` (MULTI) or ``[bits, seal]``."""
    if isinstance(reply, list) and len(reply) == 4:  # OK, QUEUED, QUEUED, [seal, bits]
        reply = reply[3][::-1] if isinstance(reply[3], list) else None
    if not (isinstance(reply, list) and len(reply) == 2 and isinstance(reply[0], list)):
        raise StoreCorrupt(f"unexpected dsbf reply for leaf {node}: {reply!r:.80}")
    bits, seal = reply
    if len(bits) != size:
        raise StoreCorrupt(f"dsbf leaf {node}: {len(bits)} bits for {size} positions")
    return np.array(bits, dtype=np.uint8), seal is not None


_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1


def location(h1: npt.NDArray[np.uint64], level: int) -> npt.NDArray[np.uint64]:
    """The location hash of ``level`` (splitmix64 of h1 with a per-level offset)."""
    z = h1 + np.uint64((_GOLDEN * (level + 1)) & _MASK)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def leaf_size(leaf_bits: int, error: float) -> tuple[int, int, int]:
    """``(u, k, split_at)``: URLs a leaf is planned for, hashes, count at which it splits."""
    if leaf_bits < 64:
        raise ConfigError(f"leaf_bits={leaf_bits}: must be at least 64")
    if not 0 < error < 1:
        raise ConfigError(f"error={error}: f_max must be between 0 and 1 (e.g. 0.001)")
    u = max(1, math.floor(leaf_bits * math.log(2) ** 2 / -math.log(error)))  # seed eq. (4)
    k = max(1, round(math.log(2) * leaf_bits / u))  # eq. (6)
    split_at = max(1, math.floor(-leaf_bits / k * math.log1p(-(error ** (1 / k)))))
    return u, k, split_at


class ValkeyDsbfStore(ValkeyStore):
    """Approximate, growing without bound: leaves split when they pass f_max."""

    kind = "dsbf"
    config_keys: ClassVar[tuple[str, ...]] = ("capacity", "error", "leaf_bits", "fanout")

    @classmethod
    def defaults(cls, requested: Mapping[str, Any]) -> dict[str, Any]:
        capacity = requested.get("capacity") or 10_000_000
        error = requested.get("error") or 0.001
        leaf_bits = requested.get("leaf_bits") or (1 << 23)
        fanout = requested.get("fanout") or 2
        if capacity < 1 or fanout < 2:
            raise ConfigError(
                f"capacity={capacity}, fanout={fanout}: need capacity >= 1 and fanout >= 2"
            )
        u, k, split_at = leaf_size(leaf_bits, error)
        return {
            "capacity": capacity,
            "error": error,
            "leaf_bits": leaf_bits,
            "fanout": fanout,
            "leaves": math.ceil(capacity / u),  # seed eq. (5), rounded up
            "hashes": k,
            "split_at": split_at,
        }

    def _setup(self) -> None:
        self._m = int(self.config["leaf_bits"])
        self._k = int(self.config["hashes"])
        self._c = int(self.config["leaves"])
        self._fanout = int(self.config["fanout"])
        self._split_at = int(self.config["split_at"])
        self._tree_key = f"{{{self.prefix}}}:tree"
        self._split: set[str] = set()
        self._read_tree()

    # ------------------------------------------------------------------ tree

    def _read_tree(self) -> None:
        (members,) = self._router.execute(
            [Cmd(self._tree_key, ("SMEMBERS", self._tree_key))], idempotent=True
        )
        self._split = {m.decode() if isinstance(m, bytes) else str(m) for m in members}

    def _key(self, node: str) -> str:
        return f"{{{self.prefix}:d{node}}}"

    def nodes(self) -> list[str]:
        """Every node ever created (leaves and split ones), from this client's copy of the tree."""
        out = [str(j) for j in range(self._c)]
        i = 0
        while i < len(out):
            if out[i] in self._split:
                out.extend(f"{out[i]}.{j}" for j in range(self._fanout))
            i += 1
        return out

    def _paths(self, h1: npt.NDArray[np.uint64]) -> list[list[str]]:
        """Each URL's path: sealed ancestors, then the leaf, by this client's tree."""
        depth = 1 + max((p.count(".") + 1 for p in self._split), default=0)
        locs = [location(h1, 0) % np.uint64(self._c)]
        locs += [location(h1, d) % np.uint64(self._fanout) for d in range(1, depth + 1)]
        columns = [loc.tolist() for loc in locs]
        paths = []
        split = self._split
        for i in range(len(h1)):
            node = str(columns[0][i])
            path = [node]
            d = 1
            while node in split:
                node = f"{node}.{columns[d][i]}"
                path.append(node)
                d += 1
            paths.append(path)
        return paths

    # ------------------------------------------------------------------ batches

    def _batched(self, urls: Iterable[str], build: Any, *, write: bool) -> list[bool]:
        self._check_open()
        items = list(urls)
        if not items:
            return []
        h1, h2 = hash_pairs(items, self.profile)
        offsets = positions(h1, h2, self._k, self._m)
        out: list[bool | None] = [None] * len(items)
        with self._translated(out, write):
            for lo in range(0, len(items), self.batch):
                hi = min(len(items), lo + self.batch)
                self._resolve(np.arange(lo, hi), h1, offsets, out, write)
        return out  # type: ignore[return-value]  # every slot filled

    def _resolve(
        self,
        todo: npt.NDArray[np.intp],
        h1: npt.NDArray[np.uint64],
        offsets: npt.NDArray[np.uint64],
        out: list[bool | None],
        write: bool,
    ) -> None:
        k = self._k
        for _round in range(64):
            if not len(todo):
                return
            paths = self._paths(h1[todo])
            found = np.zeros(len(todo), dtype=bool)
            leaf_flag = np.zeros(len(todo), dtype=bool)
            again = np.zeros(len(todo), dtype=bool)
            by_node: dict[tuple[str, bool], list[int]] = {}
            for j, path in enumerate(paths):
                for node in path[:-1]:
                    by_node.setdefault((node, False), []).append(j)
                by_node.setdefault((path[-1], True), []).append(j)
            jobs = [(node, np.array(m, dtype=np.intp), leaf) for (node, leaf), m in by_node.items()]
            # One request: lookups in the sealed ancestors, test-and-set in the leaves.
            replies = self._router.execute(
                self._commands(jobs, todo, offsets, write), idempotent=not write
            )
            added: dict[str, int] = {}
            sealed: list[str] = []
            for (node, idx, is_leaf), reply in zip(jobs, replies, strict=True):
                bits, seal = _bits_and_seal(reply, len(idx) * k, node)
                any_zero = bits.reshape(len(idx), k).min(axis=1) == 0
                if not is_leaf:
                    found[idx] |= ~any_zero
                elif seal:  # sealed by another client: this was a lookup; go on below it
                    found[idx] |= ~any_zero
                    again[idx] = True
                    sealed.append(node)
                elif write:
                    leaf_flag[idx] = any_zero
                    added[node] = int(any_zero.sum())
                else:
                    found[idx] |= ~any_zero
            if added:
                sealed += self._count(added)
            if sealed:
                self._register(sealed)
            settled = ~again | found
            for j in np.flatnonzero(settled).tolist():
                out[int(todo[j])] = bool(leaf_flag[j] and not found[j]) if write else bool(found[j])
            todo = todo[~settled]
        raise StoreCorrupt(f"{self._where()}: tree deeper than 64 levels; is split_at wrong?")

    def _commands(
        self,
        jobs: list[tuple[str, npt.NDArray[np.intp], bool]],
        todo: npt.NDArray[np.intp],
        offsets: npt.NDArray[np.uint64],
        write: bool,
    ) -> list[Cmd]:
        """Per node: an atomic test-and-set with the seal read (``MULTI GET BITFIELD EXEC``)
        for a leaf being added to; else a lookup, then the seal (``BITFIELD_RO``, ``GET``)."""
        k = self._k
        keys = [self._key(node) for node, _, _ in jobs]
        flat = offsets[todo[np.concatenate([idx for _, idx, _ in jobs])]].ravel()
        sizes = [len(idx) * k for _, idx, _ in jobs]
        sets = commands([("BITFIELD", key) for key in keys], (_SET, flat, _ONE), sizes)
        gets = commands([("BITFIELD_RO", key) for key in keys], (_GET, flat), sizes)
        cmds = []
        for (_node, _idx, is_leaf), key, set_bits, get_bits in zip(
            jobs, keys, sets, gets, strict=True
        ):
            seal = _pack("GET", key + ":s")
            if is_leaf and write:
                packed = _MULTI + seal + set_bits + _EXEC
                cmds.append(Cmd(key, ("MULTI",), None, packed, replies=4))
            else:
                cmds.append(Cmd(key, ("BITFIELD_RO",), None, get_bits + seal, replies=2))
        return cmds

    def _count(self, added: dict[str, int]) -> list[str]:
        """Add confirmed inserts to the leaves' counts; seal those past f_max (their names)."""
        keys = {node: self._key(node) for node in added}
        totals = self._router.execute(
            [Cmd(keys[n], ("INCRBY", keys[n] + ":n", c)) for n, c in added.items()],
            idempotent=False,
        )
        full = [n for n, total in zip(added, totals, strict=True) if int(total) >= self._split_at]
        if full:
            self._router.execute(
                [Cmd(keys[n], ("SET", keys[n] + ":s", 1)) for n in full], idempotent=True
            )
        return full

    def _register(self, sealed: list[str]) -> None:
        """Record splits in the shared tree index and re-read it (other clients split too)."""
        self._router.execute(
            [Cmd(self._tree_key, ("SADD", self._tree_key, *sealed))], idempotent=True
        )
        self._read_tree()
        self._split.update(sealed)

    # ------------------------------------------------------------------ size

    def _counts(self) -> dict[str, int]:
        self._read_tree()
        nodes = self.nodes()
        keys = [self._key(n) + ":n" for n in nodes]
        replies = self._router.execute([Cmd(k, ("GET", k)) for k in keys], idempotent=True)
        return {n: int(r or 0) for n, r in zip(nodes, replies, strict=True)}

    def __len__(self) -> int:
        self._check_open()
        return sum(self._counts().values())

    def stats(self) -> StoreStats:
        self._check_open()
        counts = self._counts()
        nodes = list(counts)
        replies = self._router.execute(
            [Cmd(self._key(n), ("STRLEN", self._key(n))) for n in nodes]
            + [Cmd(self._key(n), ("BITCOUNT", self._key(n))) for n in nodes],
            idempotent=True,
        )
        lengths, ones = replies[: len(nodes)], dict(zip(nodes, replies[len(nodes) :], strict=True))
        k, m = self._k, self._m

        def fpr(node: str) -> float:
            """From the bits actually set (a sealed leaf can take a stale client's last batch)."""
            return float((int(ones[node]) / m) ** k)

        def miss(node: str, weight: float, survive: float) -> float:
            """Weighted probability that a new URL routed through ``node`` is reported seen."""
            survive *= 1 - fpr(node)
            if node not in self._split:
                return weight * (1 - survive)
            share = weight / self._fanout
            return sum(miss(f"{node}.{j}", share, survive) for j in range(self._fanout))

        rate = sum(miss(str(j), 1 / self._c, 1.0) for j in range(self._c))
        leaves = [n for n in nodes if n not in self._split]
        return self._stats(
            count=sum(counts.values()),
            exact=False,
            bytes_used=sum(int(x) for x in lengths),
            capacity=int(self.config["capacity"]),
            fill_ratio=sum(counts[n] for n in leaves) / (len(leaves) * self._split_at),
            false_positive_rate=rate,
            expected_false_positives=sum(
                expected_false_positives(c, m, k) for c in counts.values()
            ),
            extra={
                "leaves": len(leaves),
                "splits": len(self._split),
                "depth": max(n.count(".") + 1 for n in nodes),
                "leaf_bits": m,
                "hashes": k,
                "split_at": self._split_at,
                "f_max": float(self.config["error"]),
            },
        )
