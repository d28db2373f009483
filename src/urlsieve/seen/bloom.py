"""``bloom:PATH?capacity=N&error=E`` — a growable blocked Bloom filter in a memory-mapped file.

**Blocks.** Each URL touches one 512-bit block (one cache line) of 8 words of
64 bits, and sets ``t`` bits in *every* word of it (``k = 8t`` bits; the
"split block" layout of Parquet's and Impala's filters, with cache-line
blocks). The 128-bit fingerprint (xxh3-128 of the canonical URL) is split
in two 64-bit halves ``h1``, ``h2``: the top 32 bits of ``h1`` pick the block
(``(h1 >> 32) * blocks >> 32``), the low 6 bits of each byte of ``h2`` pick
the bit in each word, and for ``t = 2`` the top 2 bits of each byte of
``h2`` with a nibble of ``h1``'s low half pick a second one. Every bit
comes from its own hash bits: no CRC, no derived sequences.

**Sizing.** A blocked filter is worse than a classic one of the same size,
because blocks are unevenly loaded: with ``j`` URLs in a block the false
positive probability is ``(1 - (1 - 1/64)^(j·t))^(8t)``, and ``j`` is Poisson
with mean ``n / blocks``. Each layer gets the fewest blocks (over ``t`` in
1, 2) for which that average is at most the layer's error at its capacity.

**Growth.** When a layer holds its capacity, a new one is appended to the
same file: capacity ×2, error ×½, the first at ``ε·(1 − ½)``, so the errors
sum to less than ``ε`` however far the filter grows (scalable Bloom
filters, Almeida et al. 2007). A URL is seen when any layer has it; new URLs
go to the last layer.

**Batches** (``add_many``, ``add_fingerprints``) are compiled
(``urlsieve._speedups``: ``bloom_test`` and ``bloom_insert`` compute each URL's
block and bits from its fingerprint, test them and set them; ``bloom_urls``
does it for a list of URLs in the same pass as their canonical scan and
fingerprint, asking for each block as its fingerprint is made); the numpy
reference computes blocks and masks as arrays, gathers the blocks, tests them,
and ORs the new bits together per block. URLs off the canonical fast path are
fingerprinted in Python, and the batch is then inserted from the fingerprints.
A batch is tested against the filter as it was before the batch: URLs of one
batch never make each other look seen, except the same URL twice, which is new
once.

**Sharing and crashes.** Writers serialise on an exclusive ``flock``
(:mod:`urlsieve.seen._mapped`) around the bit updates only, so no bit is ever
lost to a concurrent read-modify-write. A layer's count is raised *before*
its bits are set: a writer killed mid-batch leaves the count high by at most
that batch, which only makes growth come earlier. A new layer's space is
reserved and its descriptor written before the layer count that publishes it.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt
import xxhash

from urlsieve._accel import speedups
from urlsieve.exceptions import ConfigError, StoreCorrupt, StoreFull
from urlsieve.fingerprint import (
    CHUNK,
    fill_rest,
    fingerprint_array128,
    fingerprint_one128,
    key_function,
)
from urlsieve.seen._mapped import (
    HEADER_SIZE,
    U64,
    W_NLAYERS,
    MappedStore,
    bit_counts,
    forks,
    popcount,
    reserve,
    session,
)
from urlsieve.seen._single import KIND_BLOOM, SeenBase, bind_key
from urlsieve.seen.base import StoreStats
from urlsieve.url import FILTER, Profile, canonicalize

__all__ = ["BloomStore", "false_positive_rate", "layer_size"]

BLOCK_BITS = 512
WORD_BITS = 64
WORDS = BLOCK_BITS // WORD_BITS
RATIO = 0.5  # error tightening per layer
SCALE = 2  # capacity growth per layer
DEFAULT_CAPACITY = 1_000_000
DEFAULT_ERROR = 0.001
_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1
_ONE = np.uint64(1)
_ALL_WORDS = np.uint64(0x0101010101010101)  # 8 True bytes read as one u64

_PARAMS = struct.Struct("<QddQ")  # capacity, error, ratio, scale
_LAYER = struct.Struct("<QQQQdI")  # offset, blocks, t, capacity, error, crc32
_LAYER_TABLE = 512  # byte offset of the layer table in the header
_LAYER_SIZE = 64  # bytes per entry; its count word sits at +48
MAX_LAYERS = (HEADER_SIZE - _LAYER_TABLE) // _LAYER_SIZE

Flags = npt.NDArray[np.bool_]
Blocks = npt.NDArray[np.intp]

#: Fingerprints and test of a list of URLs in one compiled pass (None without the extension).
_bloom_urls = getattr(speedups, "bloom_urls", None)
#: One add under the file lock in one compiled call (None without the extension).
_bloom_add_locked = getattr(speedups, "bloom_add_locked", None)


# ------------------------------------------------------------------ the maths


def _block_fp(j: int, t: int) -> float:
    return float((1.0 - (1.0 - 1.0 / WORD_BITS) ** (j * t)) ** (WORDS * t))


def false_positive_rate(n: float, blocks: int, t: int) -> float:
    """Expected false-positive rate of one layer of ``blocks`` blocks holding ``n`` URLs."""
    if n <= 0:
        return 0.0
    lam = n / blocks
    spread = 12 * math.sqrt(lam) + 12
    total = 0.0
    for j in range(max(0, int(lam - spread)), int(lam + spread) + 1):
        log_p = -lam + j * math.log(lam) - math.lgamma(j + 1)
        total += math.exp(log_p) * _block_fp(j, t)
    return min(1.0, total)


@lru_cache(maxsize=256)
def layer_size(capacity: int, error: float) -> tuple[int, int]:
    """``(blocks, t)``: the smallest layer whose error at ``capacity`` URLs is ≤ ``error``."""
    best: tuple[int, int] | None = None
    for t in (1, 2):
        hi = max(1, math.ceil(capacity * 1.44 * math.log2(1 / error) / BLOCK_BITS))
        while false_positive_rate(capacity, hi, t) > error:
            hi *= 2
            if hi > 1 << 32:
                break
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            if false_positive_rate(capacity, mid, t) <= error:
                hi = mid
            else:
                lo = mid + 1
        if hi <= 1 << 32 and (best is None or hi < best[0]):
            best = (hi, t)
    if best is None:
        raise ConfigError(f"a Bloom layer for {capacity:,} URLs at error {error} is too large")
    return best


def _masks(h1: U64, h2: U64, t: int) -> U64:
    """Per URL, the bits it sets in each of its block's 8 words: shape (n, 8)."""
    low = h2.astype("<u8", copy=False).view(np.uint8).reshape(-1, WORDS)
    masks: U64 = np.left_shift(_ONE, (low & np.uint8(63)).astype(np.uint64))
    if t == 2:
        nibbles = (h1[:, None] >> (np.arange(WORDS, dtype=np.uint64) * np.uint64(4))) & np.uint64(
            15
        )
        second = ((low >> np.uint8(6)).astype(np.uint64)) | (nibbles << np.uint64(2))
        masks |= np.left_shift(_ONE, second)
    return masks


#: ``_WORD_BIT[w][byte]``: the bit that byte ``w`` of ``h2`` sets in word ``w``, in a 512-bit int.
_WORD_BIT = [[1 << (64 * w + (b & 63)) for b in range(256)] for w in range(WORDS)]
_W0, _W1, _W2, _W3, _W4, _W5, _W6, _W7 = _WORD_BIT


def _block_mask(h1: int, h2: int, t: int) -> int:
    """The bits one URL sets in its block, as a 512-bit integer (word ``w`` at bits 64w…)."""
    b = h2.to_bytes(8, "little")
    mask = (
        _W0[b[0]]
        | _W1[b[1]]
        | _W2[b[2]]
        | _W3[b[3]]
        | _W4[b[4]]
        | _W5[b[5]]
        | _W6[b[6]]
        | _W7[b[7]]
    )
    if t == 2:
        for w in range(WORDS):
            mask |= 1 << (64 * w + ((b[w] >> 6) | (((h1 >> (4 * w)) & 15) << 2)))
    return mask


def _covers(rows: U64, masks: U64) -> Flags:
    """True where every bit of ``masks`` is set in ``rows`` (both (n, 8))."""
    eq = (rows & masks) == masks
    flags: Flags = eq.view(np.uint64).reshape(-1) == _ALL_WORDS
    return flags


@dataclass
class _Layer:
    index: int
    offset: int  # bytes
    blocks: int
    t: int
    capacity: int
    error: float
    bits: U64  # (blocks, 8) view into the mapping

    def __post_init__(self) -> None:
        self.count_word = (_LAYER_TABLE + self.index * _LAYER_SIZE + 48) // 8

    def block_of(self, h1: U64) -> Blocks:
        return (((h1 >> np.uint64(32)) * np.uint64(self.blocks)) >> np.uint64(32)).astype(np.intp)


class _MaskCache:
    """The masks of a batch (numpy reference only), computed once per ``t`` its layers use."""

    def __init__(self, h: U64) -> None:
        self._h = h
        self._by_t: dict[int, U64] = {}

    def of(self, layer: _Layer) -> U64:
        masks = self._by_t.get(layer.t)
        if masks is None:
            h1, h2 = np.ascontiguousarray(self._h[:, 0]), np.ascontiguousarray(self._h[:, 1])
            masks = self._by_t[layer.t] = _masks(h1, h2, layer.t)
        return masks


def _rows(fps: npt.ArrayLike) -> U64:
    """Fingerprints as a C-contiguous (n, 2) uint64 array of ``(h1, h2)`` rows."""
    rows: U64 = np.ascontiguousarray(np.asarray(fps, dtype=np.uint64).reshape(-1, 2))
    return rows


def _test(layer: _Layer, h: U64, masks: _MaskCache, where: Blocks) -> Flags:
    """Whether ``layer`` holds each fingerprint row of ``h`` (the batch's rows ``where``)."""
    if speedups is None:
        return _covers(layer.bits.take(layer.block_of(h[:, 0]), axis=0), masks.of(layer)[where])
    out = np.empty(len(h), dtype=bool)
    speedups.bloom_test(layer.bits, layer.t, h, out)
    return out


def _pack_layer(offset: int, blocks: int, t: int, capacity: int, error: float) -> bytes:
    body = _LAYER.pack(offset, blocks, t, capacity, error, 0)[:-4]
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(_LAYER_SIZE, b"\0")


class BloomStore(SeenBase, MappedStore):
    """Approximate (no false negatives), persistent, shared by processes, growing.

    ``add`` and ``in`` are one compiled call (the key and the lock-free add or lookup, see
    :mod:`urlsieve.seen._single`); ``_add_slow`` and ``_contains_slow`` are their reference
    and take what the compiled call leaves."""

    KIND = b"bloom\0\0\0"
    NAME = "bloom"

    def __init__(
        self,
        location: str,
        *,
        profile: Profile = FILTER,
        capacity: int | None = None,
        error: float | None = None,
        readonly: bool = False,
        locked: bool = False,
    ) -> None:
        if capacity is not None and capacity < 1:
            raise ConfigError(f"bloom:{location}: capacity must be at least 1, not {capacity}")
        if error is not None and not 1e-9 <= error < 0.5:
            raise ConfigError(f"bloom:{location}: error must be in [1e-9, 0.5), not {error}")
        self._locked = locked  # every add under the file lock (see seen._mapped)
        self._lockfree = not locked and not readonly  # single adds without the lock
        self._asked = (capacity, error)
        self._capacity = capacity or DEFAULT_CAPACITY
        self._error = error or DEFAULT_ERROR
        self._layers: list[_Layer] = []
        self._plan: npt.NDArray[np.int64] | None = None  # the layers, for _bloom_add_locked
        #: (words, plan) of the mapping, for the compiled lookup (None: unmapped)
        self._probe: tuple[memoryview, memoryview] | None = None
        self._fp = fingerprint_one128(profile)
        self._key = key_function(profile, 128)  # the compiled key of a str, no Python frame
        super().__init__(location, profile=profile, readonly=readonly)

    # ------------------------------------------------------------- file layout

    def _layer_plan(self, index: int) -> tuple[int, float, int, int]:
        capacity = self._capacity * SCALE**index
        error = self._error * (1 - RATIO) * RATIO**index
        blocks, t = layer_size(capacity, error)
        return capacity, error, blocks, t

    def _initial_layout(self) -> tuple[int, bytes]:
        _, _, blocks, _ = self._layer_plan(0)
        params = _PARAMS.pack(self._capacity, self._error, RATIO, SCALE)
        return HEADER_SIZE + blocks * BLOCK_BITS // 8, params

    def _init_dynamic(self, words: U64) -> None:
        capacity, error, blocks, t = self._layer_plan(0)
        entry = np.frombuffer(_pack_layer(HEADER_SIZE, blocks, t, capacity, error), np.uint64)
        start = _LAYER_TABLE // 8
        words[start : start + _LAYER_SIZE // 8] = entry
        words[W_NLAYERS] = 1

    def _load(self, params: bytes, size: int) -> None:
        capacity, error, ratio, scale = _PARAMS.unpack_from(params)
        asked_capacity, asked_error = self._asked
        if (asked_capacity is not None and asked_capacity != capacity) or (
            asked_error is not None and asked_error != error
        ):
            raise ConfigError(
                f"{self._path}: created with capacity={capacity} and error={error}; "
                "drop the parameters from the spec or give those values "
                "(a Bloom filter cannot be resized: it grows by itself)"
            )
        if ratio != RATIO or scale != SCALE:
            raise StoreCorrupt(f"{self._path}: unknown growth parameters {ratio}, {scale}")
        self._capacity, self._error = capacity, error
        nlayers = int(self._mv[W_NLAYERS])
        if not 1 <= nlayers <= MAX_LAYERS:
            raise StoreCorrupt(
                f"{self._path}: layer count {nlayers} is impossible (the file is damaged); "
                "restore it from a backup or delete it to start afresh"
            )
        assert self._mm is not None
        layers = []
        for index in range(nlayers):
            start = _LAYER_TABLE + index * _LAYER_SIZE
            raw = bytes(self._mm[start : start + _LAYER.size])
            offset, blocks, t, cap, err, crc = _LAYER.unpack(raw)
            if crc != zlib.crc32(raw[:-4]) or t not in (1, 2) or offset % 64 or not blocks:
                raise StoreCorrupt(
                    f"{self._path}: layer {index} descriptor is damaged; "
                    "restore it from a backup or delete it to start afresh"
                )
            end = offset + blocks * BLOCK_BITS // 8
            if end > size and index and os.fstat(self._fd).st_size >= end:
                break  # another process is publishing this layer: _refresh maps it
            if end > size:
                raise StoreCorrupt(
                    f"{self._path}: truncated ({size:,} bytes, layer {index} ends at {end:,}); "
                    "restore it from a backup or delete it to start afresh"
                )
            bits = self._words[offset // 8 : end // 8].reshape(blocks, WORDS)
            layers.append(_Layer(index, offset, blocks, t, cap, err, bits))
        self._layers = layers
        self._plan = np.array(
            [[la.offset // 8, la.blocks, la.t, la.capacity, la.count_word] for la in layers],
            dtype=np.int64,
        )
        if _bloom_add_locked is not None:
            self._probe = (self._mv, self._plan.data)
            key = bind_key(self._profile)
            if key is not None:
                self._seen_bind(key, KIND_BLOOM, self._mm, self._plan, self._lockfree)

    def _drop_views(self) -> None:
        self._seen_bind(None)
        self._layers = []
        self._plan = None
        self._probe = None

    def _recover(self) -> None:
        # A count is raised before its batch's bits are set: a writer killed between the
        # two leaves counts above what the bits hold. Every new URL set a bit of its own.
        for layer in self._layers:
            bits = popcount(layer.bits)
            if int(self._mv[layer.count_word]) > bits:
                self._mv[layer.count_word] = bits

    def _verify(self) -> None:
        for layer in self._layers:
            bits = popcount(layer.bits)
            count = int(self._mv[layer.count_word])
            if bits < count:  # every URL counted new set at least one bit that was clear
                raise self._damaged(f"layer {layer.index}: {bits:,} bits set for {count:,} URLs")

    def _refresh(self) -> None:
        if self._mv[W_NLAYERS] != len(self._layers):  # another process added a layer
            self._remap()

    def _add_layer(self) -> _Layer:
        index = len(self._layers)
        if index >= MAX_LAYERS:
            raise StoreFull(f"{self._path}: the Bloom filter has {MAX_LAYERS} layers, the most")
        capacity, error, blocks, t = self._layer_plan(index)
        last = self._layers[-1]
        offset = last.offset + last.blocks * BLOCK_BITS // 8
        reserve(self._fd, offset, blocks * BLOCK_BITS // 8, self._path, f"adding layer {index}")
        assert self._mm is not None
        start = _LAYER_TABLE + index * _LAYER_SIZE
        self._mm[start : start + _LAYER_SIZE] = _pack_layer(offset, blocks, t, capacity, error)
        self._mv[W_NLAYERS] = index + 1  # publishes the layer
        self._remap()
        return self._layers[-1]

    # ------------------------------------------------------------ fingerprints

    def _fingerprint(self, url: str) -> tuple[int, int]:
        """The reference of the single-URL fingerprint (the tests hold them equal)."""
        value = xxhash.xxh3_128_intdigest(canonicalize(url, self._profile).encode("ascii"))
        return value >> 64, value & _M64

    def _fingerprints(self, urls: Iterable[str]) -> U64:
        return fingerprint_array128(urls, self._profile)

    # ------------------------------------------------------------ one at a time

    def _has_one(self, layer: _Layer, h1: int, mask: int) -> tuple[bool, int, int]:
        """(covered, byte offset of the block, its bits) for one URL in one layer."""
        offset = layer.offset + (((h1 >> 32) * layer.blocks) >> 32) * 64
        block = int.from_bytes(self._mm[offset : offset + 64], "little")  # type: ignore[index]
        return block & mask == mask, offset, block

    def _one(self, url: str) -> tuple[int, int]:
        key = self._key
        h = key(url) if key is not None and type(url) is str else None
        return self._fp(url) if h is None else h

    def _add_slow(self, url: str) -> bool:
        key = self._key  # (inline: a frame is a fifth of this call)
        h = key(url) if key is not None and type(url) is str else None
        h1, h2 = self._fp(url) if h is None else h
        probe = self._probe
        if probe is not None and self._lockfree and self._generation == forks[0]:
            held = _bloom_add_locked(probe[0], -2, probe[1], h1, h2)  # type: ignore[misc]
            if held >= 0:
                if held == 2:  # added while a locked section ran: its bits again, locked
                    self._redo(probe[1].nbytes // 40 - 1, h1, h2)
                return bool(held != 1)
        return self.add_fingerprint((h1, h2))

    def add_fingerprint(self, fp: tuple[int, int]) -> bool:
        """Add one 128-bit fingerprint ``(h1, h2)``; True when no layer held it."""
        h1, h2 = fp
        if _bloom_add_locked is not None and not self._readonly:
            if self._locked:
                with self._lock:  # the lock, the header checks and the add in one call
                    probe = self._probe
                    held = -2
                    if probe is not None and self._generation == forks[0]:
                        held = _bloom_add_locked(probe[0], self._fd, probe[1], h1, h2)
            else:  # lock-free (the GIL is held through the call: no thread remaps meanwhile)
                probe = self._probe
                held = -2
                if probe is not None and self._generation == forks[0]:
                    held = _bloom_add_locked(probe[0], -2, probe[1], h1, h2)
            if held >= 0:
                if held == 2:  # added while a locked section ran: its bits again, locked
                    assert probe is not None
                    self._redo(probe[1].nbytes // 40 - 1, h1, h2)
                return held != 1
        # the reference, and what the compiled call leaves (a new layer, a repair)
        masks = {1: _block_mask(h1, h2, 1)}
        with self._writing:
            for layer in self._layers:
                mask = masks.get(layer.t) or masks.setdefault(layer.t, _block_mask(h1, h2, 2))
                covered, offset, block = self._has_one(layer, h1, mask)
                if covered:
                    return False
            if self._mv[layer.count_word] >= layer.capacity:
                layer = self._add_layer()
                mask = masks.get(layer.t) or _block_mask(h1, h2, layer.t)
                _, offset, block = self._has_one(layer, h1, mask)
            session(self._mv, 3, layer.count_word)  # + 1 (lock-free adds raise it too)
            self._mm[offset : offset + 64] = (block | mask).to_bytes(64, "little")  # type: ignore[index]
            return True

    def _redo(self, index: int, h1: int, h2: int) -> None:
        """Set the bits of ``(h1, h2)`` in layer ``index`` again, under the lock (a lock-free
        add overlapped a locked section, whose plain writes may have lost its bits)."""
        with self._writing:
            layer = self._layers[index]
            mask = _block_mask(h1, h2, layer.t)
            _, offset, block = self._has_one(layer, h1, mask)
            self._mm[offset : offset + 64] = (block | mask).to_bytes(64, "little")  # type: ignore[index]

    def _contains_slow(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        key = self._key  # (inline: a frame is a tenth of this call)
        h = key(url) if key is not None and type(url) is str else None
        h1, h2 = self._fp(url) if h is None else h
        probe = self._probe  # one attribute: the views of one mapping (no lock needed)
        if probe is not None:  # the header check and the lookup in one call
            held = _bloom_add_locked(probe[0], -1, probe[1], h1, h2)  # type: ignore[misc]
            if held >= 0:
                return bool(held)
        masks = {1: _block_mask(h1, h2, 1)}
        with self._reading:
            for layer in self._layers:
                mask = masks.get(layer.t) or masks.setdefault(layer.t, _block_mask(h1, h2, 2))
                if self._has_one(layer, h1, mask)[0]:
                    return True
            return False

    # ------------------------------------------------------------------ batches

    def _compiled(self) -> bool:
        return _bloom_urls is not None and self._profile.fast_path

    def _scan(
        self, batch: list[str], layer: _Layer, h: U64, out: Flags, count: U64 | None
    ) -> tuple[list[int], list[bool] | None]:
        """The fingerprints of ``batch`` into ``h`` and their test against ``layer`` into
        ``out``, compiled in one pass (``bloom_urls``): held by the layer (``count`` None)
        or lacked by it (``count``, the layer's count word, given: then, when every URL of
        a batch of at most ``CHUNK`` is on the canonical fast path, it is inserted).

        Returns the positions of the URLs off the fast path, which are fingerprinted
        and tested here (the batch was not inserted when there are any), and, for a
        batch of at most ``CHUNK`` without any, ``out`` as a list. Raises
        :class:`InvalidURL` for the first bad URL.
        """
        profile, n = self._profile, len(batch)
        rest: list[int] = []
        listed: list[bool] | None = None
        for start in range(0, n, CHUNK):
            part = batch[start : start + CHUNK] if n > CHUNK else batch
            end = start + len(part)
            found, listed = _bloom_urls(  # type: ignore[misc]
                part,
                profile.fast_query,
                profile.keep_port,
                layer.bits,
                layer.t,
                h[start:end],
                out[start:end],
                count if n <= CHUNK else None,
            )
            rest += [start + at for at in found]
        if rest:
            assert speedups is not None  # bloom_urls is its function
            fill_rest(batch, rest, profile, 128, h)
            at = np.asarray(rest, dtype=np.intp)
            held = np.empty(len(at), dtype=bool)
            speedups.bloom_test(layer.bits, layer.t, h[at], held)
            out[at] = held if count is None else ~held
        return rest, listed if n <= CHUNK else None

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        batch = urls if isinstance(urls, list) else list(urls)
        if not batch or not self._compiled() or self._readonly:  # read-only: a bad URL first
            new: list[bool] = self.add_fingerprints(self._fingerprints(batch)).tolist()
            return new
        n = len(batch)
        h = np.empty((n, 2), dtype=np.uint64)
        flags = np.empty(n, dtype=bool)
        failed: Exception | None = None
        with self._writing:
            first = self._layers[0]
            count = self._words[first.count_word : first.count_word + 1]
            alone = len(self._layers) == 1 and first.capacity - int(count[0]) >= n
            fused = alone and n <= CHUNK  # one compiled call tests and inserts
            try:
                rest, listed = self._scan(batch, first, h, flags, count if fused else None)
            except Exception as exc:  # a bad URL: nothing was added (raised once unlocked)
                failed = exc
            else:
                if fused and not rest:  # inserted
                    assert listed is not None
                    return listed
                assert speedups is not None  # bloom_urls is its function
                if alone:
                    if not fused:  # flags: held, the test of a batch in parts
                        np.logical_not(flags, out=flags)
                    speedups.bloom_insert(first.bits, first.t, h, flags, count, True)
                elif len(self._layers) > 1:  # flags: held by the first layer
                    flags = self._add_rows(h, _MaskCache(h), flags, tested=1)
                else:  # the only layer, too full for the batch: tested part by part
                    flags = self._add_rows(h, _MaskCache(h), np.zeros(n, dtype=bool), tested=0)
        if failed is not None:
            raise failed
        added: list[bool] = flags.tolist()
        return added

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        batch = urls if isinstance(urls, list) else list(urls)
        if not batch or not self._compiled():
            held: list[bool] = self.contains_fingerprints(self._fingerprints(batch)).tolist()
            return held
        n = len(batch)
        h = np.empty((n, 2), dtype=np.uint64)
        flags = np.empty(n, dtype=bool)
        with self._reading:
            _, listed = self._scan(batch, self._layers[0], h, flags, None)
            if listed is not None and len(self._layers) == 1:
                return listed
            self._test_rows(h, _MaskCache(h), flags, tested=1)
        found: list[bool] = flags.tolist()
        return found

    def contains_fingerprint(self, fp: tuple[int, int]) -> bool:
        """Membership of one 128-bit fingerprint ``(h1, h2)`` (one compiled call)."""
        probe = self._probe
        if probe is not None:
            held = _bloom_add_locked(probe[0], -1, probe[1], fp[0], fp[1])  # type: ignore[misc]
            if held >= 0:
                return bool(held)
        return bool(self.contains_fingerprints([fp])[0])

    def contains_fingerprints(self, fps: npt.ArrayLike) -> Flags:
        """Membership of 128-bit fingerprints given as an (n, 2) array of ``(h1, h2)`` halves."""
        h = _rows(fps)
        seen = np.zeros(len(h), dtype=bool)
        with self._reading:
            self._test_rows(h, _MaskCache(h), seen, tested=0)
        return seen

    def _test_rows(self, h: U64, masks: _MaskCache, seen: Flags, tested: int) -> None:
        """``seen`` |= held by a layer, for the layers after the first ``tested``."""
        for layer in self._layers[tested:]:
            todo = np.flatnonzero(~seen)
            if not todo.size:
                break
            seen[todo] = _test(layer, h if todo.size == len(h) else h[todo], masks, todo)

    def add_fingerprints(self, fps: npt.ArrayLike) -> Flags:
        """Add 128-bit fingerprints ((n, 2) array); True where reported new (once per repeat)."""
        h = _rows(fps)
        if not len(h):
            return np.zeros(0, dtype=bool)
        with self._writing:
            return self._add_rows(h, _MaskCache(h), np.zeros(len(h), dtype=bool), tested=0)

    def _add_rows(self, h: U64, masks: _MaskCache, seen: Flags, tested: int) -> Flags:
        """Add the rows ``h`` (``seen``: held by the first ``tested`` layers); the new ones."""
        new = np.zeros(len(h), dtype=bool)
        for layer in self._layers[tested:-1]:
            todo = np.flatnonzero(~seen)
            seen[todo] = _test(layer, h[todo], masks, todo)
        pending = np.flatnonzero(~seen)
        while pending.size:
            layer = self._layers[-1]
            room = layer.capacity - int(self._mv[layer.count_word])
            if room <= 0:
                # The full layer was not tested yet: what it holds is not new.
                hit = _test(layer, h[pending], masks, pending)
                pending = pending[~hit]
                if pending.size:
                    self._add_layer()
                continue
            part, pending = pending[:room], pending[room:]
            if len(part) == len(h):  # the whole batch: no copies
                new = self._insert(layer, h, masks, part)
                continue
            new[part] = self._insert(layer, h[part], masks, part)
            if pending.size:  # what this part set may cover later URLs of the batch
                hit = _test(layer, h[pending], masks, pending)
                pending = pending[~hit]
        return new

    def _insert(self, layer: _Layer, h: U64, masks: _MaskCache, where: Blocks) -> Flags:
        """Insert the fingerprint rows ``h`` (the batch's rows ``where``) into ``layer``;
        True for each row it did not hold before the batch.

        The batch is tested against the layer as it was before it (URLs of one
        batch never make each other look seen, unless they are the same URL:
        then only the first is new). Compiled when ``urlsieve._speedups`` is
        built; :meth:`_insert_numpy` is the reference it is tested against.
        """
        if speedups is None:
            return self._insert_numpy(layer, h[:, 0], h[:, 1], masks.of(layer)[where])
        fresh = np.empty(len(h), dtype=bool)
        count = self._words[layer.count_word : layer.count_word + 1]
        speedups.bloom_insert(layer.bits, layer.t, h, fresh, count)  # the count first
        return fresh

    def _insert_numpy(self, layer: _Layer, h1: U64, h2: U64, masks: U64) -> Flags:
        """:meth:`_insert` in numpy: the bits are ORed in once per block (sorted by block)."""
        n = len(h1)
        # by (h1, h2): the same fingerprints end up adjacent, and blocks sorted (monotone in h1)
        order = np.lexsort((h2, h1))
        sorted_h1 = h1[order]
        blocks = layer.block_of(sorted_h1)
        sorted_masks = masks[order]
        bits = layer.bits
        rows = bits.take(blocks, axis=0)
        fresh = ~_covers(rows, sorted_masks)
        same = np.flatnonzero(sorted_h1[1:] == sorted_h1[:-1])
        if same.size:  # perhaps repeats inside the batch: only the earliest is new
            sorted_h2 = h2[order]
            same = same[sorted_h2[same + 1] == sorted_h2[same]]
            repeat = np.zeros(n, dtype=bool)
            repeat[same + 1] = True
            starts = np.flatnonzero(~repeat)
            first = np.minimum.reduceat(order, starts)
            keep = np.zeros(n, dtype=bool)
            keep[first] = True
            fresh &= keep[order]
        new = np.zeros(n, dtype=bool)
        new[order[fresh]] = True
        added = int(fresh.sum())
        self._mv[layer.count_word] += added  # the count first: see the module doc
        if added:
            if added < n:
                where = np.flatnonzero(fresh)
                blocks, rows, sorted_masks = blocks[where], rows[where], sorted_masks[where]
            starts = np.flatnonzero(np.concatenate(([True], blocks[1:] != blocks[:-1])))
            merged = np.bitwise_or.reduceat(sorted_masks, starts, axis=0)
            merged |= rows[starts]
            void = bits.view(np.dtype((np.void, BLOCK_BITS // 8))).reshape(-1)
            void[blocks[starts]] = merged.view(void.dtype).reshape(-1)
        return new

    # ------------------------------------------------------------------ the rest

    def __len__(self) -> int:
        with self._reading:
            return sum(int(self._mv[layer.count_word]) for layer in self._layers)

    def stats(self) -> StoreStats:
        with self._reading:
            layers = self._layers
            counts = [int(self._mv[layer.count_word]) for layer in layers]
            set_bits = 0
            total_bits = 0
            miss = 1.0  # probability that no layer reports a new URL as seen, measured
            for layer in layers:
                ones, rate = _measure(layer)
                set_bits += ones
                total_bits += layer.blocks * BLOCK_BITS
                miss *= 1.0 - rate
            end = layers[-1].offset + layers[-1].blocks * BLOCK_BITS // 8
            return StoreStats(
                backend=self.NAME,
                profile=self._profile.ident,
                count=sum(counts),
                exact=False,
                bytes_used=end,
                capacity=sum(layer.capacity for layer in layers),
                fill_ratio=set_bits / total_bits,
                false_positive_rate=1.0 - miss,
                expected_false_positives=_expected_false_positives(layers, counts),
                extra={
                    "path": self._path,
                    "error": self._error,
                    "layers": [
                        {
                            "capacity": layer.capacity,
                            "count": count,
                            "error": layer.error,
                            "blocks": layer.blocks,
                            "bits_per_url": layer.blocks * BLOCK_BITS / layer.capacity,
                            "k": WORDS * layer.t,
                        }
                        for layer, count in zip(layers, counts, strict=True)
                    ],
                },
            )


def _measure(layer: _Layer) -> tuple[int, float]:
    """(set bits, false-positive rate measured from the bits) of one layer."""
    ones = 0
    rate = 0.0
    step = 1 << 18
    for start in range(0, layer.blocks, step):
        pop = bit_counts(layer.bits[start : start + step]).astype(np.float64)
        ones += int(pop.sum())
        rate += float(np.prod((pop / WORD_BITS) ** layer.t, axis=1).sum())
    return ones, rate / layer.blocks


def _expected_false_positives(layers: list[_Layer], counts: list[int]) -> float:
    """Expected number of new URLs reported as seen while the counted URLs were added.

    Computed as if they came one at a time: URLs of one batch never make each
    other look seen, so with large batches the true number is a little lower.
    """
    total = 0.0
    older = 1.0  # probability that the full layers before this one all miss
    steps = 32
    for layer, count in zip(layers, counts, strict=True):
        if count:
            xs = [count * i / steps for i in range(steps + 1)]
            ys = [1.0 - older * (1.0 - false_positive_rate(x, layer.blocks, layer.t)) for x in xs]
            simpson = ys[0] + ys[-1] + sum((4 if i % 2 else 2) * ys[i] for i in range(1, steps))
            total += simpson * count / steps / 3
        older *= 1.0 - false_positive_rate(count, layer.blocks, layer.t)
    return total
