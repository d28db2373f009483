"""``valkey://host:6379/0?prefix=urlsieve:learn&group=learners`` — the queue of a fleet.

Several gateways offer, several learners claim, through Valkey (or Redis ≥ 6.2) Streams.

Layout (every key starts with ``{prefix}`` so one hash slot holds them all and every Lua
script below runs atomically on one node):

- ``{prefix}:s0`` … ``{prefix}:s7`` — one stream per priority band (streams are FIFO, so
  priority is the band: a claim reads the highest band first). An entry carries the URL's
  digest. A URL whose counts lift it into a higher band while it waits is re-added there;
  the old entry is acknowledged and deleted when it is read (its record names another id).
- one consumer group (``group``, default ``learners``) on every band, created with
  ``XGROUP CREATE … MKSTREAM``: a claim is ``XREADGROUP``; ``done`` is ``XACK`` + ``XDEL``;
  a lease that runs out is taken over with ``XAUTOCLAIM`` (min-idle = the claimer's
  lease), which counts as a failed attempt. So on Valkey a job is taken over once it has
  been idle (server time) longer than the *claimer's* lease — the learners of a pool use
  one lease (on SQLite the holder's own lease decides). Use one group per prefix (a second group on
  the same prefix would see entries the first one owns).
- ``{prefix}:r:<digest>`` — a hash per URL (the de-duplication record): state, URL, host,
  counts, current stream entry, generation; after ``done`` it expires ``recheck`` seconds
  later, so until then the URL is not queued again.
- ``{prefix}:c:<digest>`` — a set of up to 32 client digests (distinct clients, bounded).
- ``{prefix}:hosts`` — hosts with a verdict; ``{prefix}:delayed`` — retries by due time;
  ``{prefix}:n`` — counters (waiting, leased, done, failed, stale, dropped, sightings, queued).

Every operation is one Lua script (atomic); the client's clock gives "now" for first
sightings, retry delays and re-check ages; lease expiry is the server's idle time.

Errors: a server that does not answer, times out, is loading, out of memory or read-only
raises :class:`QueueUnavailable` (``raise … from``); nothing is retried behind the caller's
back, and nothing already queued is lost (with ``appendonly yes`` on the server) — a
learner loop retries.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from urlsieve.exceptions import ConfigError, LearnError, QueueUnavailable
from urlsieve.learn.queue import (
    BANDS,
    BURST_WINDOW,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RECHECK,
    MAX_CLIENTS,
    MAX_SITE,
    MAX_URL_BYTES,
    ClosingQueue,
    Job,
    QueueStats,
    Sighting,
    check_claim,
    check_options,
    decode_url,
    encode_url,
    group,
    host_of,
)
from urlsieve.store import valkey as valkey_store

__all__ = [
    "ValkeyQueue",
    "open_redis",
    "open_rediss",
    "open_unix",
    "open_valkey",
    "open_valkeys",
]

#: URLs per offer script call (bounds the argument list of one call).
_CHUNK = 500

_COMMON_LUA = """
local p = ARGV[1]
local counters = KEYS[1]
local hosts = p .. ':hosts'
local delayed = p .. ':delayed'
local function level(req, cli)
  if cli >= 8 then return 3 elseif cli >= 3 then return 2
  elseif cli >= 2 or req >= 4 then return 1 end
  return 0
end
local function band(host, req, cli)
  local b = level(req, cli)
  if redis.call('HEXISTS', hosts, host) == 0 then b = b + 4 end
  return b
end
local function stream(b) return p .. ':s' .. b end
local function drop(s, g, id)
  redis.call('XACK', s, g, id)
  redis.call('XDEL', s, id)
end
local function finish(rk, d, state, now, recheck)
  redis.call('HSET', rk, 's', state, 'fin', now, 'dl', 0)
  redis.call('EXPIRE', rk, math.max(1, math.ceil(recheck)))
  redis.call('DEL', p .. ':c:' .. d)
end
"""

# ARGV: prefix, now, recheck, max_clients, sightings, dropped,
#       then per URL: digest, url, host, first, requests, client digests (16 hex each)
_OFFER = (
    _COMMON_LUA
    + """
local now, recheck, maxc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function add_clients(ck, cs, have)
  local n = have
  for j = 1, #cs, 16 do
    if n >= maxc then break end
    n = n + redis.call('SADD', ck, string.sub(cs, j, j + 15))
  end
  return n
end
local queued, i = 0, 7
while i <= #ARGV do
  local d, url, host, first = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local nreq, cs = tonumber(ARGV[i + 4]), ARGV[i + 5]
  i = i + 6
  local rk, ck = p .. ':r:' .. d, p .. ':c:' .. d
  local r = redis.call('HMGET', rk, 's', 'fin', 'req', 'cli', 'band', 'dl', 'first', 'gen')
  local s = r[1]
  if (not s) or ((s == 'd' or s == 'f') and now - tonumber(r[2]) >= recheck) then
    redis.call('DEL', ck, rk)
    local cli = add_clients(ck, cs, 0)
    local b = band(host, nreq, cli)
    local id = redis.call('XADD', stream(b), '*', 'd', d)
    local gen = 1
    if r[8] then gen = tonumber(r[8]) + 1 end
    redis.call('HSET', rk, 's', 'w', 'url', url, 'host', host, 'first', first, 'req', nreq,
      'cli', cli, 'att', 0, 'band', b, 'e', id, 'dl', 0, 'gen', gen)
    redis.call('HINCRBY', counters, 'waiting', 1)
    queued = queued + 1
  elseif s == 'w' or s == 'l' then
    local req = redis.call('HINCRBY', rk, 'req', nreq)
    local cli = tonumber(r[4])
    if cli < maxc and #cs > 0 then
      local n = add_clients(ck, cs, cli)
      if n ~= cli then
        redis.call('HSET', rk, 'cli', n)
        cli = n
      end
    end
    if tonumber(first) < tonumber(r[7]) then redis.call('HSET', rk, 'first', first) end
    if s == 'w' and r[6] == '0' then
      local host = redis.call('HGET', rk, 'host')
      local b = band(host, req, cli)
      if b > tonumber(r[5]) then
        local id = redis.call('XADD', stream(b), '*', 'd', d)
        redis.call('HSET', rk, 'band', b, 'e', id)
      end
    end
  end
end
redis.call('HINCRBY', counters, 'sightings', tonumber(ARGV[5]))
redis.call('HINCRBY', counters, 'dropped', tonumber(ARGV[6]))
redis.call('HINCRBY', counters, 'queued', queued)
return queued
"""
)

# ARGV: prefix, group, consumer, count, lease_ms, now, max_attempts, recheck
# returns per job: url, digest, band, entry id, first, requests, clients, attempts, gen
_CLAIM = (
    _COMMON_LUA
    + """
local g, c = ARGV[2], ARGV[3]
local left, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local now, maxatt, recheck = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local out = {}
local function hand(rk, d, b, id)
  local r = redis.call('HMGET', rk, 'url', 'first', 'req', 'cli', 'att', 'gen')
  for _, v in ipairs({r[1], d, b, id, r[2], r[3], r[4], r[5], r[6]}) do out[#out + 1] = v end
  left = left - 1
end
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1000)
for _, d in ipairs(due) do
  redis.call('ZREM', delayed, d)
  local rk = p .. ':r:' .. d
  local r = redis.call('HMGET', rk, 's', 'host', 'req', 'cli')
  if r[1] == 'w' then
    local b = band(r[2], tonumber(r[3]), tonumber(r[4]))
    local id = redis.call('XADD', stream(b), '*', 'd', d)
    redis.call('HSET', rk, 'band', b, 'e', id, 'dl', 0)
  end
end
for b = 7, 0, -1 do
  if left <= 0 then break end
  local s = stream(b)
  -- leases that ran out (the learner died or is too slow): a failed attempt each
  local cursor = '0-0'
  for _ = 1, 16 do
    if left <= 0 then break end
    local r = redis.call('XAUTOCLAIM', s, g, c, lease_ms, cursor, 'COUNT', left)
    cursor = r[1]
    for _, e in ipairs(r[2]) do
      local id = e[1]
      if type(e[2]) ~= 'table' then
        redis.call('XACK', s, g, id)
      else
        local d = e[2][2]
        local rk = p .. ':r:' .. d
        local st = redis.call('HMGET', rk, 's', 'e')
        if st[1] ~= 'l' or st[2] ~= id then
          drop(s, g, id)
        elseif redis.call('HINCRBY', rk, 'att', 1) >= maxatt then
          drop(s, g, id)
          finish(rk, d, 'f', now, recheck)
          redis.call('HINCRBY', counters, 'leased', -1)
          redis.call('HINCRBY', counters, 'failed', 1)
        else
          hand(rk, d, b, id)
        end
      end
    end
    if cursor == '0-0' then break end
  end
  while left > 0 do
    local r = redis.call('XREADGROUP', 'GROUP', g, c, 'COUNT', left, 'STREAMS', s, '>')
    if not r or #r[1][2] == 0 then break end
    for _, e in ipairs(r[1][2]) do
      local id, d = e[1], e[2][2]
      local rk = p .. ':r:' .. d
      local st = redis.call('HMGET', rk, 's', 'e', 'host')
      if st[1] ~= 'w' or st[2] ~= id then
        drop(s, g, id)
      elseif b >= 4 and redis.call('HEXISTS', hosts, st[3]) == 1 then
        -- its host got a verdict while it waited: one band down (read later in this loop)
        local nid = redis.call('XADD', stream(b - 4), '*', 'd', d)
        redis.call('HSET', rk, 'band', b - 4, 'e', nid)
        drop(s, g, id)
      else
        redis.call('HSET', rk, 's', 'l')
        redis.call('HINCRBY', counters, 'waiting', -1)
        redis.call('HINCRBY', counters, 'leased', 1)
        hand(rk, d, b, id)
      end
    end
  end
end
return out
"""
)

# ARGV: prefix, group, now, recheck, then per job: digest, gen, band, entry id
_DONE = (
    _COMMON_LUA
    + """
local g, now, recheck = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local n, stale = 0, 0
for i = 5, #ARGV, 4 do
  local d, gen, jb, jid = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local rk = p .. ':r:' .. d
  local r = redis.call('HMGET', rk, 's', 'gen', 'band', 'e', 'host', 'dl')
  if (r[1] == 'w' or r[1] == 'l') and r[2] == gen then
    if r[1] == 'l' then
      redis.call('HINCRBY', counters, 'leased', -1)
    else
      redis.call('HINCRBY', counters, 'waiting', -1)
      if r[6] == '1' then redis.call('ZREM', delayed, d) end
    end
    drop(stream(r[3]), g, r[4])
    finish(rk, d, 'd', now, recheck)
    redis.call('HSETNX', hosts, r[5], now)
    n = n + 1
  else
    stale = stale + 1
  end
  if jid ~= r[4] then drop(stream(jb), g, jid) end
end
redis.call('HINCRBY', counters, 'done', n)
redis.call('HINCRBY', counters, 'stale', stale)
return n
"""
)

# ARGV: prefix, group, now, recheck, delay, max_attempts,
#       then per job: digest, gen, band, entry id, consumer
_RETRY = (
    _COMMON_LUA
    + """
local g, now, recheck = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local delay, maxatt = tonumber(ARGV[5]), tonumber(ARGV[6])
local n, stale, failed = 0, 0, 0
for i = 7, #ARGV, 5 do
  local d, gen, jb, jid, c = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local rk = p .. ':r:' .. d
  local r = redis.call('HMGET', rk, 's', 'gen', 'e')
  local s = stream(jb)
  local owned = false
  if r[1] == 'l' and r[2] == gen and r[3] == jid then
    owned = #redis.call('XPENDING', s, g, jid, jid, 1, c) == 1
  end
  if owned then
    drop(s, g, jid)
    redis.call('HINCRBY', counters, 'leased', -1)
    n = n + 1
    if redis.call('HINCRBY', rk, 'att', 1) >= maxatt then
      finish(rk, d, 'f', now, recheck)
      failed = failed + 1
    else
      redis.call('HSET', rk, 's', 'w', 'dl', 1)
      redis.call('ZADD', delayed, now + delay, d)
      redis.call('HINCRBY', counters, 'waiting', 1)
    end
  else
    stale = stale + 1
  end
end
redis.call('HINCRBY', counters, 'failed', failed)
redis.call('HINCRBY', counters, 'stale', stale)
return n
"""
)

_STAT_NAMES = ("waiting", "leased", "done", "failed", "stale", "dropped", "sightings", "queued")


def _digest(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


class ValkeyQueue(ClosingQueue):
    """An :class:`~urlsieve.learn.queue.UnknownQueue` on Valkey Streams (see the module doc)."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "urlsieve:learn",
        group: str = "learners",
        recheck: float = DEFAULT_RECHECK,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_url: int = MAX_URL_BYTES,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_options(recheck, max_attempts, max_url)
        if not prefix or not group:
            raise ConfigError(f"prefix={prefix!r}, group={group!r}: both must be non-empty")
        if not timeout > 0:
            raise ConfigError(f"timeout={timeout!r}: must be > 0 seconds")
        self.url = url
        self.prefix = prefix
        self.group = group
        self.recheck = recheck
        self.max_attempts = max_attempts
        self.max_url = max_url
        self._clock = clock
        self._p = "{" + prefix + "}"
        self._counters = self._p + ":n"
        client: Any = valkey_store.connect(url, what="the learning queue", timeout=timeout)
        from valkey import exceptions as vx

        self._vx = vx
        self._client: Any = client
        self._scripts = {
            name: client.register_script(source)
            for name, source in (
                ("offer", _OFFER),
                ("claim", _CLAIM),
                ("done", _DONE),
                ("retry", _RETRY),
            )
        }
        self._grouped = False
        self._call("create the consumer group", self._ensure_groups)

    # ------------------------------------------------------------------ plumbing

    def _ensure_groups(self) -> None:
        for b in range(BANDS):
            try:
                self._client.xgroup_create(f"{self._p}:s{b}", self.group, id="0", mkstream=True)
            except self._vx.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._grouped = True

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; driver errors become :class:`QueueUnavailable` or :class:`LearnError`."""
        vx = self._vx
        if self._client is None:
            raise QueueUnavailable(f"{self.url}: the queue is closed")
        for attempt in (0, 1):
            try:
                if not self._grouped:
                    self._ensure_groups()
                return fn()
            except (vx.ValkeyError, OSError) as exc:
                if "NOGROUP" in str(exc) and attempt == 0:  # the server lost its data: regroup
                    self._grouped = False
                    continue
                raise valkey_store.server_error(
                    exc,
                    where=self.url,
                    doing=what,
                    unavailable=QueueUnavailable,
                    refused=LearnError,
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(self, name: str, what: str, args: list[Any]) -> Any:
        script = self._scripts[name]
        return self._call(what, lambda: script(keys=[self._counters], args=args))

    @staticmethod
    def _parse(job: Job) -> tuple[str, str, str, str] | None:
        """``gen/band/entry id/consumer`` of a job's key, None when it is not one of ours."""
        parts = str(job.key).split("/", 3)
        if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        return parts[0], parts[1], parts[2], parts[3]

    def _job_args(self, jobs: Sequence[Job], *, consumer: bool) -> tuple[list[Any], int]:
        args: list[Any] = []
        bad = 0
        for job in jobs:
            raw = encode_url(job.url, self.max_url)
            key = self._parse(job)
            if raw is None or key is None:
                bad += 1
                continue
            args += [_digest(raw), *key] if consumer else [_digest(raw), *key[:3]]
        return args, bad

    def _count_stale(self, n: int) -> None:
        if n:
            self._call("count", lambda: self._client.hincrby(self._counters, "stale", n))

    # ------------------------------------------------------------------ the protocol

    def offer(self, sightings: Sequence[Sighting]) -> int:
        now = self._clock()
        batch = group(sightings, now, self.max_url)
        items = list(batch.urls.items())
        queued = 0
        for lo in range(0, max(1, len(items)), _CHUNK):
            chunk = items[lo : lo + _CHUNK]
            args: list[Any] = [
                self._p,
                repr(now),
                repr(self.recheck),
                MAX_CLIENTS,
                batch.sightings if lo == 0 else 0,
                batch.dropped if lo == 0 else 0,
            ]
            for raw, seen in chunk:
                args += [
                    _digest(raw),
                    raw,
                    host_of(raw),
                    repr(seen.first),
                    seen.requests,
                    "".join(c.hex() for c in seen.clients),
                ]
            queued += int(self._run("offer", "offer", args))
        return queued

    def admit(self, site: str, limit: int, window: float = BURST_WINDOW) -> bool:
        if limit <= 0:
            return False
        key = f"{self._p}:b:".encode() + str(site).encode("utf-8", "surrogatepass")[:MAX_SITE]
        ttl = max(1, math.ceil(window))

        def count() -> int:
            pipe = self._client.pipeline(transaction=True)
            pipe.set(key, 0, ex=ttl, nx=True)
            pipe.incr(key)
            return int(pipe.execute()[1])

        return bool(self._call("admit", count) <= limit)

    def claim(self, consumer: str, count: int, *, lease: float = 60.0) -> list[Job]:
        check_claim(consumer, lease)
        if count <= 0:
            return []
        args = [
            self._p,
            self.group,
            consumer,
            count,
            max(1, math.ceil(lease * 1000)),
            repr(self._clock()),
            self.max_attempts,
            repr(self.recheck),
        ]
        flat = self._run("claim", "claim", args)
        jobs = []
        for i in range(0, len(flat), 9):
            url, _, b, entry, first, requests, clients, attempts, gen = flat[i : i + 9]
            jobs.append(
                Job(
                    url=decode_url(bytes(url)),
                    key=f"{int(gen)}/{int(b)}/{entry.decode()}/{consumer}",
                    first_seen=float(first),
                    requests=int(requests),
                    clients=int(clients),
                    attempts=int(attempts),
                )
            )
        return jobs

    def done(self, jobs: Sequence[Job]) -> int:
        args, bad = self._job_args(jobs, consumer=False)
        self._count_stale(bad)
        if not args:
            return 0
        head = [self._p, self.group, repr(self._clock()), repr(self.recheck)]
        return int(self._run("done", "done", head + args))

    def retry(self, jobs: Sequence[Job], *, delay: float = 30.0) -> int:
        args, bad = self._job_args(jobs, consumer=True)
        self._count_stale(bad)
        if not args:
            return 0
        head = [
            self._p,
            self.group,
            repr(self._clock()),
            repr(self.recheck),
            repr(max(0.0, float(delay))),
            self.max_attempts,
        ]
        return int(self._run("retry", "retry", head + args))

    def _counts(self) -> dict[str, int]:
        values = self._call(
            "read the counters", lambda: self._client.hmget(self._counters, _STAT_NAMES)
        )
        return {
            name: int(v) if v is not None else 0
            for name, v in zip(_STAT_NAMES, values, strict=True)
        }

    def depth(self) -> int:
        counts = self._counts()
        return counts["waiting"] + counts["leased"]

    def stats(self) -> QueueStats:
        counts = self._counts()
        return QueueStats(
            backend="valkey",
            extra={"server": self.url, "prefix": self.prefix, "group": self.group},
            **counts,
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _opener(scheme: str) -> Callable[..., ValkeyQueue]:
    def open_scheme(location: str, *, db: int | None = None, **params: Any) -> ValkeyQueue:
        if not location.startswith("//"):
            raise ConfigError(
                f"{scheme}:{location}: write {scheme}://host:port/db (or unix:///path.sock)"
            )
        url = f"{scheme}:{location}"
        if db is not None:
            url += f"?db={db}"
        return ValkeyQueue(url, **params)

    open_scheme.__name__ = f"open_{scheme}"
    open_scheme.__doc__ = f"Open a ``{scheme}://`` queue (the registry's opener)."
    return open_scheme


open_valkey = _opener("valkey")
open_valkeys = _opener("valkeys")
open_redis = _opener("redis")
open_rediss = _opener("rediss")
open_unix = _opener("unix")
