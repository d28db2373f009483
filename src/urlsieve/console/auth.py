"""The console's login: password hashes, sessions, anti-forgery tokens, rate limits.

A password is stored as ``scrypt$N$r$p$salt$hash`` (:func:`hash_password`, the CLI's
``urlsieve console hash-password``); the service token (``service.token``) is accepted
too. Sessions live in the service's memory (a restart logs everyone out) and expire
``session_minutes`` after login. Each session has its own anti-forgery token, which every
console form posts back (compared in constant time), as the continue confirmation does.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateLimit", "Session", "Sessions", "hash_password", "sign", "signed", "verify_password"]

#: scrypt's cost: 2**14 × 8 × 128 bytes = 16 MiB per check, about 50 ms.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
#: The longest password checked (longer is refused before hashing).
MAX_PASSWORD = 1024


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """``scrypt$N$r$p$salt$hash`` for ``password`` (a random salt unless given)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def check_hash(stored: str) -> str:
    """``stored`` when it is a hash :func:`verify_password` reads, else ValueError."""
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt" or not all(p.isdigit() for p in parts[1:4]):
        raise ValueError(
            "console.password_hash must be scrypt$N$r$p$salt$hash: make one with "
            "`urlsieve console hash-password`"
        )
    n, r, p = (int(x) for x in parts[1:4])
    if not (2 <= n <= 1 << 20 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16):
        raise ValueError("console.password_hash: scrypt parameters out of range")
    try:
        _unb64(parts[4]), _unb64(parts[5])
    except ValueError:
        raise ValueError("console.password_hash: the salt or hash is not base64") from None
    return stored


def verify_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches ``stored`` (constant-time comparison)."""
    if len(password) > MAX_PASSWORD:
        return False
    try:
        _, n, r, p, salt, digest = check_hash(stored).split("$")
        expected = _unb64(digest)
        got = hashlib.scrypt(
            password.encode("utf-8", "surrogatepass"),
            salt=_unb64(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
            maxmem=256 << 20,
        )
    except (ValueError, UnicodeEncodeError):
        return False
    return hmac.compare_digest(got, expected)


def sign(key: bytes, *parts: str) -> str:
    """An HMAC-SHA256 tag of ``parts`` (each length-prefixed, so no two lists collide)."""
    message = "".join(f"{len(p)}:{p}" for p in parts).encode("utf-8", "surrogatepass")
    return _b64(hmac.new(key, message, hashlib.sha256).digest())


def signed(key: bytes, token: str, *parts: str) -> bool:
    return hmac.compare_digest(token.encode("ascii", "replace"), sign(key, *parts).encode())


@dataclass
class Session:
    sid: str
    csrf: str
    expires: float
    started: float


class Sessions:
    """Logged-in sessions, by their cookie value (random, 256 bits)."""

    def __init__(self, minutes: float, clock: Callable[[], float] = time.time) -> None:
        self.seconds = minutes * 60
        self._clock = clock
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def start(self) -> Session:
        now = self._clock()
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + self.seconds, now
        )
        with self._lock:
            self._purge(now)
            self._by_id[session.sid] = session
        return session

    def get(self, sid: str | None) -> Session | None:
        """The live session of a cookie value, or None (unknown or expired)."""
        if not sid or len(sid) > 100:
            return None
        now = self._clock()
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and session.expires <= now:
                del self._by_id[sid]
                return None
        return session

    def end(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)

    def _purge(self, now: float) -> None:
        for sid in [s for s, v in self._by_id.items() if v.expires <= now]:
            del self._by_id[sid]


class RateLimit:
    """At most ``count`` events per key in any ``seconds`` (a sliding window), for at most
    ``keys`` keys (the oldest are forgotten first)."""

    def __init__(
        self,
        count: int,
        seconds: float,
        *,
        keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.seconds = seconds
        self._keys = keys
        self._clock = clock
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        """Count one event for ``key``; False (not counted) when over the limit."""
        now = self._clock()
        with self._lock:
            times = self._events.pop(key, None) or deque()
            while times and times[0] <= now - self.seconds:
                times.popleft()
            ok = len(times) < self.count
            if ok:
                times.append(now)
            self._events[key] = times  # re-inserted: the newest key is last
            while len(self._events) > self._keys:
                del self._events[next(iter(self._events))]
        return ok

    def retry_after(self, key: str) -> float:
        with self._lock:
            times = self._events.get(key)
            if not times or len(times) < self.count:
                return 0.0
            return max(0.0, times[0] + self.seconds - self._clock())
