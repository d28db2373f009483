"""URL fingerprints: fixed-size digests of the canonical URL under a profile.

A fingerprint is computed from ``canonical.encode("ascii")`` (canonical URLs
are ASCII), so equivalent spellings share one. 64-bit fingerprints (xxh3)
key exact sets; 128-bit fingerprints (xxh3-128) split into two independent
64-bit halves drive Bloom filter indices (double hashing) — never CRC32,
whose affine structure wrecks Bloom error rates at power-of-two sizes.
CRC32, MD5 and SHA-1 signatures stay available for the seed stores.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Any, Literal

import numpy as np
import xxhash

from urlsieve._accel import speedups
from urlsieve.url import FILTER, URL, Profile, canonicalize

__all__ = [
    "SIGNATURES",
    "canonical_bytes",
    "fingerprint128",
    "fingerprint64",
    "fingerprint_array128",
    "fingerprint_one128",
    "fingerprint_one64",
    "fingerprint_array64",
    "fingerprints128",
    "fingerprints64",
    "key_arguments",
    "key_function",
    "signature",
]

SignatureKind = Literal["crc32", "md5", "sha1", "xxh64", "xxh128"]
#: Signature kinds and their size in bits.
SIGNATURES: dict[str, int] = {"crc32": 32, "md5": 128, "sha1": 160, "xxh64": 64, "xxh128": 128}

_xxh64 = xxhash.xxh3_64_intdigest
_xxh128 = xxhash.xxh3_128_digest


def canonical_bytes(url: str | URL, profile: Profile = FILTER) -> bytes:
    """The canonical serialisation every fingerprint is computed from."""
    text = url.canonical if isinstance(url, URL) else canonicalize(url, profile)
    return text.encode("ascii")


#: One URL's fingerprint in one compiled call (absent without the extension).
_url_key = getattr(speedups, "url_key", None)
_PACK128 = struct.Struct(">QQ").pack


def fingerprint64(url: str | URL, profile: Profile = FILTER) -> int:
    """64-bit fingerprint (xxh3-64) of the canonical URL, as an unsigned int."""
    if _url_key is not None and type(url) is str and profile.fast_path:
        key: int | None = _url_key(
            profile.fast_query, profile.keep_port, 64, profile.query_plan, url
        )
        if key is not None:
            return key
    return _xxh64(canonical_bytes(url, profile))


def fingerprints64(urls: Iterable[str], profile: Profile = FILTER) -> list[int]:
    """:func:`fingerprint64` of each URL (raises :class:`InvalidURL` on the first bad one)."""
    return [_xxh64(canonicalize(u, profile).encode("ascii")) for u in urls]


def key_arguments(profile: Profile) -> tuple[bool, bool, Any] | None:
    """What the compiled fingerprint takes of ``profile`` (``url_key``'s allow-query,
    keep-port and query-plan arguments), ``None`` without the extension or for a profile
    the compiled path does not take: :func:`key_function` binds them, and the seen stores'
    compiled ``add``/``in`` (``urlsieve.seen._single``) hold them."""
    if _url_key is None or not profile.fast_path:
        return None
    return (profile.fast_query, profile.keep_port, profile.query_plan)


def key_function(profile: Profile, bits: int) -> Callable[[str], Any] | None:
    """The compiled fingerprint of one ``str`` under ``profile`` as a C callable (no
    Python frame): an int (``bits`` 64) or ``(high, low)`` (128), or ``None`` for a URL
    off the compiled path (then :func:`fingerprint64` / :func:`fingerprint128` decide).
    ``None`` without the extension or for a profile the compiled path does not take."""
    args = key_arguments(profile)
    if args is None or _url_key is None:  # (the second: for the type checker)
        return None
    allow_query, keep_port, plan = args
    return functools.partial(_url_key, allow_query, keep_port, bits, plan)


def fingerprint_one64(profile: Profile = FILTER) -> Callable[[str], int]:
    """:func:`fingerprint64` under ``profile`` as a function of the URL alone."""
    key_of = key_function(profile, 64)

    def one(url: str) -> int:
        if key_of is not None and type(url) is str:
            key = key_of(url)
            if key is not None:
                return key  # type: ignore[no-any-return]
        return _xxh64(canonical_bytes(url, profile))

    return one


def fingerprint_one128(profile: Profile = FILTER) -> Callable[[str], tuple[int, int]]:
    """The 128-bit fingerprint under ``profile`` as ``(high, low)`` halves, a function of
    the URL alone (see :func:`fingerprint_one64`)."""
    key_of = key_function(profile, 128)

    def one(url: str) -> tuple[int, int]:
        if key_of is not None and type(url) is str:
            key = key_of(url)
            if key is not None:
                return key  # type: ignore[no-any-return]
        value = xxhash.xxh3_128_intdigest(canonical_bytes(url, profile))
        return value >> 64, value & 0xFFFFFFFFFFFFFFFF

    return one


def fingerprint128(url: str | URL, profile: Profile = FILTER) -> bytes:
    """128-bit fingerprint (xxh3-128), 16 bytes big-endian."""
    if _url_key is not None and type(url) is str and profile.fast_path:
        key: tuple[int, int] | None = _url_key(
            profile.fast_query, profile.keep_port, 128, profile.query_plan, url
        )
        if key is not None:
            return _PACK128(*key)
    return _xxh128(canonical_bytes(url, profile))


def fingerprints128(urls: Iterable[str], profile: Profile = FILTER) -> list[bytes]:
    """:func:`fingerprint128` of each URL (raises :class:`InvalidURL` on the first bad one)."""
    return [_xxh128(canonicalize(u, profile).encode("ascii")) for u in urls]


#: The compiled batch (absent without the extension, or in an older build of it).
_hashes = getattr(speedups, "canonical_hashes", None)
#: URLs a compiled call takes at most: a batch is cut into parts this long, so the
#: working set of a huge call stays in cache (one 1M-URL call was 1.9x slower a URL).
CHUNK = 16384


def _fill(urls: list[str], profile: Profile, bits: int, out: np.ndarray) -> None:
    """Fingerprints of ``urls`` into ``out``: compiled for the canonical fast path, the
    reference (``xxhash`` over :func:`canonicalize`) for every other URL."""
    rest: list[int] = []
    if _hashes is not None and profile.fast_path:
        for start in range(0, len(urls), CHUNK):
            # one chunk goes as it is: a copy of the list touches every string
            part = urls[start : start + CHUNK] if len(urls) > CHUNK else urls
            view = out[start : start + len(part)]
            found = _hashes(part, profile.fast_query, bits, view, profile.keep_port)
            rest += [start + at for at in found]
    else:
        rest = list(range(len(urls)))
    fill_rest(urls, rest, profile, bits, out)


def fill_rest(
    urls: list[str], rest: list[int], profile: Profile, bits: int, out: np.ndarray
) -> None:
    """The reference fingerprints of ``urls[at]`` for each ``at`` in ``rest`` (the URLs a
    compiled batch left: off the canonical fast path) into ``out[at]``.

    Raises :class:`InvalidURL` for the first bad one (``rest`` is in order).
    """
    digest = _xxh64 if bits == 64 else xxhash.xxh3_128_intdigest
    plan = profile.query_plan if _url_key is not None and profile.fast_path else None
    for at in rest:
        if plan is not None and type(urls[at]) is str:  # the crawler's query, compiled
            key = _url_key(False, profile.keep_port, bits, plan, urls[at])  # type: ignore[misc]
            if key is not None:
                out[at] = key
                continue
        value = digest(canonicalize(urls[at], profile).encode("ascii"))
        if bits == 64:
            out[at] = value
        else:
            out[at] = (value >> 64, value & 0xFFFFFFFFFFFFFFFF)


def fingerprint_array64(urls: Iterable[str], profile: Profile = FILTER) -> np.ndarray:
    """:func:`fingerprints64` as a uint64 array, batched (:class:`InvalidURL` on a bad URL)."""
    batch = urls if isinstance(urls, list) else list(urls)
    out = np.empty(len(batch), dtype=np.uint64)
    _fill(batch, profile, 64, out)
    return out


def fingerprint_array128(urls: Iterable[str], profile: Profile = FILTER) -> np.ndarray:
    """:func:`fingerprints128` as an (n, 2) uint64 array of (high, low) halves, batched."""
    batch = urls if isinstance(urls, list) else list(urls)
    out = np.empty((len(batch), 2), dtype=np.uint64)
    _fill(batch, profile, 128, out)
    return out


def signature(url: str | URL, kind: SignatureKind = "crc32", profile: Profile = FILTER) -> bytes:
    """A signature of the canonical URL as used by the seed systems, big-endian bytes."""
    data = canonical_bytes(url, profile)
    if kind == "crc32":
        return zlib.crc32(data).to_bytes(4, "big")
    if kind == "md5":
        return hashlib.md5(data, usedforsecurity=False).digest()
    if kind == "sha1":
        return hashlib.sha1(data, usedforsecurity=False).digest()
    if kind == "xxh64":
        return _xxh64(data).to_bytes(8, "big")
    if kind == "xxh128":
        return _xxh128(data)
    raise ValueError(f"unknown signature kind {kind!r} (choose from {', '.join(SIGNATURES)})")
