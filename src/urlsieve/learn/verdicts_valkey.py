"""The learned verdicts of a fleet, shared on Valkey: every learner stores into one hash and
builds its overlay from all of it, so each gateway's overlay enforces what any learner
learned (and an override made anywhere).

Layout (one ``{prefix}`` hash tag, so a cluster keeps it on one node):
``{prefix}:verdicts`` (hash: rule key → the verdict as JSON) and ``{prefix}:version``
(incremented by every write; a learner rebuilds its overlay when it changes).

Same contract as :class:`urlsieve.learn.verdicts.VerdictStore`: an override is never
replaced by a learned or redirect verdict, and the first sighting is kept. A server that
does not answer raises :class:`~urlsieve.exceptions.QueueUnavailable` (the learner logs it
and tries again; nothing stored is lost).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

from urlsieve.exceptions import LearnError, QueueUnavailable
from urlsieve.learn.verdicts import Learned, rule_key
from urlsieve.store import valkey as valkey_store

_WHAT = "the verdict store"

__all__ = ["ValkeyVerdicts"]

# ARGV: key1, json1, key2, json2, …  An override is never replaced by anything else, and a
# verdict without a first sighting keeps the stored one.
_PUT = """
local n = 0
for i = 1, #ARGV, 2 do
  local key, new = ARGV[i], ARGV[i + 1]
  local cur = redis.call('HGET', KEYS[1], key)
  local write = true
  if cur then
    local c, v = cjson.decode(cur), cjson.decode(new)
    if c.source == 'override' and v.source ~= 'override' then
      write = false
    elseif v.first_seen == cjson.null and c.first_seen ~= cjson.null then
      v.first_seen = c.first_seen
      new = cjson.encode(v)
    end
  end
  if write then
    redis.call('HSET', KEYS[1], key, new)
    n = n + 1
  end
end
if n > 0 then redis.call('INCR', KEYS[2]) end
return n
"""


class ValkeyVerdicts:
    """Verdicts in a Valkey hash (``valkey://host:port/db?prefix=urlsieve:learned``)."""

    def __init__(self, url: str, *, prefix: str = "urlsieve:learned", timeout: float = 5.0) -> None:
        self.url = url
        self.path = f"{url}?prefix={prefix}"  # how errors and logs name the store
        self._client: Any = valkey_store.connect(self.url, what=_WHAT, timeout=timeout)
        tag = "{" + prefix + "}"
        self._hash, self._version = f"{tag}:verdicts", f"{tag}:version"
        self._put = self._client.register_script(_PUT)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return valkey_store.call(
            fn, where=self.url, doing=what, unavailable=QueueUnavailable, refused=LearnError
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ValkeyVerdicts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, verdicts: Sequence[Learned]) -> None:
        args: list[str] = []
        for v in verdicts:
            args += [v.key, json.dumps(asdict(v), ensure_ascii=False)]
        if args:
            self._call("store verdicts", lambda: self._put([self._hash, self._version], args))

    def forget(self, keys: Sequence[str]) -> int:
        def run() -> int:
            pipe = self._client.pipeline()
            pipe.hdel(self._hash, *keys)
            pipe.incr(self._version)
            gone: int = pipe.execute()[0]
            return gone

        return self._call("forget verdicts", run) if keys else 0

    def get(self, key: str) -> Learned | None:
        raw = self._call("read a verdict", lambda: self._client.hget(self._hash, key))
        return None if raw is None else _learned(raw)

    def find(self, url: str) -> Learned | None:
        try:
            key, host = rule_key(url)
        except ValueError:
            return None
        return self.get(key) or self.get(host)

    def all(self, *, source: str | None = None) -> Iterator[Learned]:
        rows = self._call("read the verdicts", lambda: self._client.hgetall(self._hash))
        found = [_learned(raw) for raw in rows.values()]
        found.sort(key=lambda v: (v.host, v.key))
        yield from (v for v in found if source is None or v.source == source)

    def count(self) -> int:
        found: int = self._call("count the verdicts", lambda: self._client.hlen(self._hash))
        return found

    def counts(self) -> dict[tuple[str, str, str], int]:
        out: dict[tuple[str, str, str], int] = {}
        for v in self.all():
            key = (v.source, v.action, v.category)
            out[key] = out.get(key, 0) + 1
        return out

    def version(self) -> int:
        """Changes whenever any learner stores or forgets a verdict."""
        raw = self._call("read the version", lambda: self._client.get(self._version))
        return int(raw or 0)


def _learned(raw: bytes | str) -> Learned:
    data = json.loads(raw)
    data["evidence"] = tuple(tuple(e) for e in data.get("evidence") or ())
    known = Learned.__dataclass_fields__
    return Learned(**{k: v for k, v in data.items() if k in known})
