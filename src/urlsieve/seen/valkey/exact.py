"""``kind=exact``: 64-bit fingerprints in small integer sets, ~8–11 bytes per URL.

Layout. A fingerprint's top ``b`` bits pick one of ``2**b`` buckets; the other
``64 - b`` bits are the member, a decimal integer below 2⁶³, which Valkey
stores in the set's compact *intset* encoding (8 bytes per member, sorted,
no per-member pointers) as long as a bucket holds at most
``set-max-intset-entries`` members (default 512). Buckets are sized from
``capacity`` for ~256 members at capacity, so the intset encoding holds up to
about twice the capacity; past that, full buckets convert to hash tables and
cost more memory, never correctness. (A SET of 40-character hex strings,
scrapy-redis' layout, costs ~70–90 bytes per URL.)

Bucket ``i`` lives in shard ``i mod shards``, key ``{prefix:x<shard>}:<i>``: the
hash tag puts a shard's buckets in one cluster slot, so one script call per
shard tests-and-sets a whole group atomically and never crosses slots, while
the shards spread over the cluster's primaries. Each shard also keeps its
count (``{prefix:x<shard>}:n``), updated in the same script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from urlsieve.exceptions import ConfigError
from urlsieve.fingerprint import fingerprint_array64
from urlsieve.seen.base import StoreStats
from urlsieve.seen.valkey._store import Decoder, ValkeyStore, flags_from_string, group_by
from urlsieve.store.valkey.router import Cmd, Script

__all__ = ["ValkeyExactStore"]

_ADD = Script(
    """#!lua
-- KEYS[1] = "{prefix:x<shard>}:"; ARGV = bucket, member, bucket, member ...
local base = KEYS[1]
local out = {}
local added = 0
for i = 1, #ARGV, 2 do
  local r = redis.call('SADD', base .. ARGV[i], ARGV[i + 1])
  out[#out + 1] = r
  added = added + r
end
if added > 0 then redis.call('INCRBY', base .. 'n', added) end
return table.concat(out)
"""
)

_CONTAINS = Script(
    """#!lua flags=no-writes
local base = KEYS[1]
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = redis.call('SISMEMBER', base .. ARGV[i], ARGV[i + 1])
end
return table.concat(out)
"""
)

#: Members per bucket at capacity (intset encoding holds up to 512 by default).
_PER_BUCKET = 256
#: Estimated server bytes per non-empty bucket key (dict entry, key, object, header).
_KEY_OVERHEAD = 80


class ValkeyExactStore(ValkeyStore):
    """Exact: no false positives; every URL added by any client is "new" exactly once."""

    kind = "exact"
    config_keys: ClassVar[tuple[str, ...]] = ("capacity", "shards")

    @classmethod
    def defaults(cls, requested: Mapping[str, Any]) -> dict[str, Any]:
        capacity = requested.get("capacity") or 10_000_000
        if capacity < 1:
            raise ConfigError(f"capacity={capacity}: must be at least 1")
        buckets = max(256, 1 << math.ceil(math.log2(max(1, capacity / _PER_BUCKET))))
        shards = requested.get("shards") or 16
        if shards < 1 or shards > buckets:
            raise ConfigError(f"shards={shards}: must be between 1 and {buckets} (the buckets)")
        return {"capacity": capacity, "buckets": buckets, "shards": shards}

    def _setup(self) -> None:
        self._buckets = int(self.config["buckets"])
        self._shards = int(self.config["shards"])
        self._bits = self._buckets.bit_length() - 1
        self._bases = [f"{{{self.prefix}:x{s}}}:" for s in range(self._shards)]

    def _prepare(self, urls: list[str]) -> Any:
        fps = fingerprint_array64(urls, self.profile)
        bucket = fps >> np.uint64(64 - self._bits)
        member = fps & np.uint64((1 << (64 - self._bits)) - 1)
        shard = bucket % np.uint64(self._shards)
        return bucket, member, shard

    def _cmds(self, script: Script, prepared: Any, lo: int, hi: int) -> tuple[list[Cmd], Decoder]:
        bucket, member, shard = (a[lo:hi] for a in prepared)
        groups = group_by(shard)
        order = np.concatenate(groups)
        keys = [self._bases[int(shard[g[0]])] for g in groups]
        cmds = script.calls(keys, (), (bucket[order], member[order]), [len(g) for g in groups])

        def decode(replies: list[Any]) -> npt.NDArray[np.bool_]:
            flags = np.empty(hi - lo, dtype=bool)
            for g, reply in zip(groups, replies, strict=True):
                flags[g] = flags_from_string(reply, len(g))
            return flags

        return cmds, decode

    def _add_cmds(self, prepared: Any, lo: int, hi: int) -> tuple[list[Cmd], Decoder]:
        return self._cmds(_ADD, prepared, lo, hi)

    def _contains_cmds(self, prepared: Any, lo: int, hi: int) -> tuple[list[Cmd], Decoder]:
        return self._cmds(_CONTAINS, prepared, lo, hi)

    def __len__(self) -> int:
        self._check_open()
        keys = [base + "n" for base in self._bases]
        counts = self._router.execute([Cmd(k, ("GET", k)) for k in keys], idempotent=True)
        return sum(int(c) for c in counts if c is not None)

    def stats(self) -> StoreStats:
        count = len(self)
        occupied = self._buckets * -math.expm1(-count / self._buckets)
        return self._stats(
            count=count,
            exact=True,
            bytes_used=int(count * 8 + occupied * _KEY_OVERHEAD),
            capacity=int(self.config["capacity"]),
            fill_ratio=count / (self._buckets * 512),
            extra={
                "buckets": self._buckets,
                "shards": self._shards,
                "bytes_used_is": "estimate (8 B per intset member + per-key overhead)",
            },
        )
