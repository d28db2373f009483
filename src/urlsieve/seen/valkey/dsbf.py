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
its seal ``{prefix:d<P>}:s`` in the same slot. One script per leaf and batch
tests-and-sets the URLs, counts them and seals the leaf when it passes
f_max, atomically. The seal is the truth about the tree's shape, and
``{prefix}:tree`` (the set of split leaves) is the index every client reads:
a client whose copy of the tree is stale sends inserts to a sealed leaf, the
script refuses them and answers them as a lookup (marker ``S``), and the
client re-reads the tree and carries on below. So any number of clients may
race a split: a sealed leaf never changes again, a URL is inserted into
exactly one unsealed leaf, and two clients adding the same URL see one "new".

Compared with the seed paper: its batches of 300 become pipelined batches of
``batch`` URLs; its "rehash the old leaf's elements into the children" is
impossible for a Bloom filter and replaced by the kept leaf (DESIGN.md §6).
The false-positive rate of a URL is ``1 - Π(1 - f_node)`` over its path, so a
deep tree's compound rate exceeds f_max; ``stats()`` reports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from urlsieve.exceptions import ConfigError, StoreCorrupt, StoreUnavailable
from urlsieve.seen.base import StoreStats
from urlsieve.seen.valkey._client import BatchInterrupted, Cmd, Script
from urlsieve.seen.valkey._store import ValkeyStore
from urlsieve.seen.valkey.bloom import expected_false_positives, hash_pairs, positions

__all__ = ["DsbfStore"]

_LOOKUP = """
local function lookup(key, k, first)
  local bits = {}
  for s = first, #ARGV, 1000 do
    local ops = {}
    for i = s, math.min(s + 999, #ARGV) do
      ops[#ops + 1] = 'GET'; ops[#ops + 1] = 'u1'; ops[#ops + 1] = ARGV[i]
    end
    for _, v in ipairs(redis.call('BITFIELD_RO', key, unpack(ops))) do bits[#bits + 1] = v end
  end
  local out = {}
  for u = 0, #bits / k - 1 do
    local all = '1'
    for t = 1, k do if bits[u * k + t] == 0 then all = '0'; break end end
    out[#out + 1] = all
  end
  return table.concat(out)
end
"""

#: KEYS[1] leaf; ARGV: k, split_at, offsets (k per URL). Reply: one digit per URL
#: ("1" new), then "N" if this batch sealed the leaf; or lookup digits + "S" if
#: the leaf was already sealed (nothing written).
_ADD = Script(
    "#!lua\n"
    + _LOOKUP
    + """
local key = KEYS[1]
local k = tonumber(ARGV[1])
if redis.call('EXISTS', key .. ':s') == 1 then return lookup(key, k, 3) .. 'S' end
local old = {}
for s = 3, #ARGV, 1000 do
  local ops = {}
  for i = s, math.min(s + 999, #ARGV) do
    ops[#ops + 1] = 'SET'; ops[#ops + 1] = 'u1'; ops[#ops + 1] = ARGV[i]; ops[#ops + 1] = '1'
  end
  for _, v in ipairs(redis.call('BITFIELD', key, unpack(ops))) do old[#old + 1] = v end
end
local out = {}
local added = 0
for u = 0, #old / k - 1 do
  local new = '0'
  for t = 1, k do if old[u * k + t] == 0 then new = '1'; break end end
  if new == '1' then added = added + 1 end
  out[#out + 1] = new
end
local n = redis.call('INCRBY', key .. ':n', added)
if n >= tonumber(ARGV[2]) then
  redis.call('SET', key .. ':s', '1')
  return table.concat(out) .. 'N'
end
return table.concat(out)
"""
)

#: KEYS[1] node; ARGV: k, offsets. Reply: one digit per URL ("1" present), "S" if sealed.
_CHECK = Script(
    "#!lua flags=no-writes\n"
    + _LOOKUP
    + """
local key = KEYS[1]
local out = lookup(key, tonumber(ARGV[1]), 2)
if redis.call('EXISTS', key .. ':s') == 1 then return out .. 'S' end
return out
"""
)

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


class DsbfStore(ValkeyStore):
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
        try:
            for lo in range(0, len(items), self.batch):
                hi = min(len(items), lo + self.batch)
                self._resolve(np.arange(lo, hi), h1, offsets, out, write)
        except BatchInterrupted:
            raise
        except StoreUnavailable as exc:
            if write:
                raise BatchInterrupted(f"{self._where()}: {exc}", out) from exc
            raise StoreUnavailable(f"{self._where()}: {exc}") from exc
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
            # One request: lookups in every sealed ancestor, test-and-set (or lookup) in the leaf.
            jobs: list[tuple[str, npt.NDArray[np.intp], bool]] = []
            by_node: dict[tuple[str, bool], list[int]] = {}
            for j, path in enumerate(paths):
                for node in path[:-1]:
                    by_node.setdefault((node, False), []).append(j)
                by_node.setdefault((path[-1], True), []).append(j)
            cmds = []
            for (node, is_leaf), members in by_node.items():
                idx = np.array(members, dtype=np.intp)
                flat = offsets[todo[idx]].ravel().tolist()
                key = self._key(node)
                if is_leaf and write:
                    cmds.append(_ADD.call(key, k, self._split_at, *flat))
                else:
                    cmds.append(_CHECK.call(key, k, *flat))
                jobs.append((node, idx, is_leaf))
            replies = self._router.execute(cmds, idempotent=not write)
            sealed_now: list[str] = []
            for (node, idx, is_leaf), reply in zip(jobs, replies, strict=True):
                if not isinstance(reply, bytes) or len(reply) not in (len(idx), len(idx) + 1):
                    raise StoreCorrupt(f"unexpected dsbf reply for {node}: {reply!r:.80}")
                digits = np.frombuffer(reply[: len(idx)], dtype=np.uint8) == ord("1")
                marker = reply[len(idx) :]
                if not is_leaf:
                    found[idx] |= digits
                elif marker == b"S":  # sealed by someone else: a lookup; go on below it
                    found[idx] |= digits
                    again[idx] = True
                    sealed_now.append(node)
                else:
                    leaf_flag[idx] = digits
                    if marker == b"N":
                        sealed_now.append(node)
            if sealed_now:
                self._router.execute(
                    [Cmd(self._tree_key, ("SADD", self._tree_key, *sealed_now))], idempotent=True
                )
                self._read_tree()
                self._split.update(sealed_now)
            settled = ~again | found
            for j in np.flatnonzero(settled).tolist():
                if write:
                    out[int(todo[j])] = bool(leaf_flag[j] and not found[j])
                else:
                    out[int(todo[j])] = bool(found[j] or leaf_flag[j])
            todo = todo[~settled]
        raise StoreCorrupt(f"{self._where()}: tree deeper than 64 levels; is split_at wrong?")

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
        lengths = self._router.execute(
            [Cmd(self._key(n), ("STRLEN", self._key(n))) for n in nodes], idempotent=True
        )
        k, m = self._k, self._m

        def fpr(node: str) -> float:
            return float((-math.expm1(-k * counts[node] / m)) ** k)

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
