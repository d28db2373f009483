"""One URL at a time (issue 34): the compiled single-URL path equals the pure-Python
reference and the batch path.

The stores' ``add(url)`` and ``url in store`` are one C call (``SeenSingle``, the base of
``memory:``, ``exact:`` and ``bloom:``): held equal to their reference (``_add_slow``,
``_contains_slow``, what the pure-Python build calls) on arbitrary input, and followed
down every way off the fast path (closed, another handle's growth, a fork, a locked
section overlapping an add, a profile off the compiled path, a bad bind).

``url_key`` (one URL's fingerprint, with the crawler's query steps) against
``xxhash`` over :func:`canonicalize`; the stores' compiled ``add``/``in``
(``exact_add_locked``, ``bloom_add_locked``: the file lock, the header checks and the
probe in one call) against the same stores with those calls switched off, and against
their batches; the lock protocol (a dirty file is left to the Python session, which
repairs it).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from urlsieve import _accel
from urlsieve.exceptions import InvalidURL, StoreClosed
from urlsieve.fingerprint import (
    fingerprint64,
    fingerprint128,
    fingerprint_array64,
    fingerprint_array128,
    key_function,
)
from urlsieve.seen import bloom, exact
from urlsieve.seen._mapped import W_COUNT, W_DIRTY, forks
from urlsieve.seen.bloom import BloomStore
from urlsieve.seen.exact import ExactStore
from urlsieve.seen.memory import MemoryStore
from urlsieve.url import CRAWLER, FILTER, Profile, canonicalize, crawler_profile
from urlsieve.url.profile import DEFAULT_HOST_STEPS

speedups = pytest.importorskip("urlsieve._speedups", reason="built without a C compiler")
if _accel.speedups is None:  # URLSIEVE_PURE_PYTHON: the stores run their references
    pytest.skip("the compiled extension is turned off", allow_module_level=True)

PROFILES = [
    FILTER,
    CRAWLER,
    crawler_profile(sort=False, name="nosort"),
    crawler_profile(drop=(), name="nodrop"),
    crawler_profile(drop=("a", "b*", "ü"), name="custom"),
]

_QUERY = st.text(alphabet="ab=&%2F0%41 #+éutm_gclid.~\x7f", max_size=40)
_URLS = st.one_of(
    st.builds(
        lambda host, path, query: f"http://{host}/{path}?{query}",
        st.sampled_from(["example.com", "A.Example.COM", "1.2.3.4", "x.org:8080", "h.de."]),
        st.text(alphabet="ab/.%2e", max_size=12),
        _QUERY,
    ),
    st.text(max_size=60),
    st.binary(max_size=80).map(lambda b: b.decode("utf-8", "surrogateescape")),
)


def _reference(url: str, profile: Profile, bits: int) -> object:
    """xxh3 of the canonical form (the Python canonicaliser), or the InvalidURL."""
    try:
        data = canonicalize(url, profile).encode("ascii")
    except InvalidURL as exc:
        return type(exc)
    if bits == 64:
        return xxhash.xxh3_64_intdigest(data)
    value = xxhash.xxh3_128_intdigest(data)
    return (value >> 64, value & (2**64 - 1))


@settings(max_examples=400, deadline=None)
@given(url=_URLS, which=st.integers(0, len(PROFILES) - 1), bits=st.sampled_from([64, 128]))
@example(url="http://a.com/?utm_source=x", which=1, bits=64)
@example(url="http://a.com/p?b=2&&a=1&a=1&", which=1, bits=64)
@example(url="http://a.com/p?%26=1&x=%2526", which=1, bits=128)
@example(url="http://a.com/p?", which=2, bits=64)
@example(url="http://a.com/p?z&%20=y&~=1", which=3, bits=64)
def test_url_key_is_the_reference_fingerprint(url: str, which: int, bits: int) -> None:
    profile = PROFILES[which]
    key = key_function(profile, bits)
    assert key is not None
    got = key(url)
    want = _reference(url, profile, bits)
    if got is not None:  # on the compiled path: the reference's fingerprint
        assert got == want
    # the public single functions (compiled or not) and the batch agree with the reference
    single = fingerprint64 if bits == 64 else fingerprint128
    batch = fingerprint_array64 if bits == 64 else fingerprint_array128
    if want is InvalidURL:
        with pytest.raises(InvalidURL):
            single(url, profile)
        with pytest.raises(InvalidURL):
            batch([url], profile)
        return
    one = single(url, profile)
    many = batch([url, url], profile)
    if bits == 64:
        assert one == want == int(many[0]) == int(many[1])
    else:
        assert isinstance(want, tuple)
        assert one == ((want[0] << 64) | want[1]).to_bytes(16, "big")
        assert tuple(int(x) for x in many[0]) == want


_QUERIES = [
    "",
    "&",
    "&&a=1&&",
    "b=2&a=1",
    "a=1&a=1&A=1",
    "b",
    "b=",
    "bb=1&ba&b",
    "utm_=1&utm_source=x&utmz=1&gclid&gclid=1&GCLID=2",
    "%C3%BC=1&\u00fc=2&%FC=3",
    "%26=1&%3D=2&a%3Db=3",
    "x=%2526&x=%25&x=%",
    "q=a+b&q=a%20b&q=a b",
    "z&y&x&%7E&~",
    "a=1#frag&b=2",
    "k=\x7f&k=%7F&k=%80",
]


@pytest.mark.parametrize("query", _QUERIES)
@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
def test_url_key_on_query_cases(query: str, profile: Profile) -> None:
    key = key_function(profile, 64)
    assert key is not None
    url = f"http://example.com/p?{query}"
    got = key(url)
    assert got is None or got == _reference(url, profile, 64)
    if not set(query) & set("\u00fc\x7f #"):  # printable ASCII: on the compiled path
        assert got is not None


def test_the_crawler_query_is_on_the_compiled_path() -> None:
    """A crawl's URLs with a query are fingerprinted in one call, not by the Python steps."""
    key = key_function(CRAWLER, 64)
    assert key is not None
    for url in (
        "http://example.com/a?b=2&a=1",
        "https://shop.example.org/p/1?utm_source=news&id=7&gclid=x",
        "http://example.com/?",
        "http://example.com/s?q=caf%C3%A9+au+lait&page=2",
    ):
        assert key(url) is not None, url
        assert key(url) == _reference(url, CRAWLER, 64)
    assert key("http://example.com/a?utm_source=x&b=2&a=1") == key(
        "http://example.com/a?a=1&b=2"
    ), "tracking dropped, order ignored"


@pytest.mark.parametrize(
    "args",
    [
        (True, False, 32, None, "http://a.com/"),
        (True, False, 64, (True, (1,), (), True, True), "http://a.com/"),
        (True, False, 64, (True, (), ()), "http://a.com/"),
        (True, False, 64, None, b"http://a.com/"),
    ],
)
def test_url_key_refuses_bad_arguments(args: tuple[object, ...]) -> None:
    with pytest.raises((TypeError, ValueError)):
        speedups.url_key(*args)


def _urls(rng: np.random.Generator, n: int) -> list[str]:
    out = []
    for _ in range(n):
        host = f"h{rng.integers(0, 400)}.example.com"
        query = "&".join(
            f"{k}={rng.integers(0, 9)}" for k in rng.choice(["a", "b", "utm_x", "c"], size=2)
        )
        url = f"http://{host}/p/{rng.integers(0, 50)}?{query}"
        if rng.random() < 0.1:
            url = url.upper().replace("HTTP://", "http://")
        if rng.random() < 0.05:
            url = "javascript:alert(1)"
        out.append(url)
    return out


def _store(
    kind: str, path: Path, profile: Profile, locked: bool = False
) -> ExactStore | BloomStore | MemoryStore:
    if kind == "exact":  # grows
        return ExactStore(str(path / "s.exact"), profile=profile, capacity=200, locked=locked)
    if kind == "bloom":  # grows a layer or two
        return BloomStore(
            str(path / "s.bloom"), profile=profile, capacity=300, error=0.0001, locked=locked
        )
    return MemoryStore(profile=profile)


def _reference_or_raise(url: str, profile: Profile) -> int:
    return xxhash.xxh3_64_intdigest(canonicalize(url, profile).encode("ascii"))


def _one_by_one(
    store: ExactStore | BloomStore | MemoryStore, urls: list[str], reference: bool = False
) -> list[object]:
    """``store.add`` of each URL (``reference``: the Python method the compiled one is held
    equal to, as the pure-Python build calls it)."""
    add = store._add_slow if reference else store.add
    out: list[object] = []
    for url in urls:
        try:
            out.append(add(url))
        except InvalidURL:
            out.append(InvalidURL)
    return out


def _held(
    store: ExactStore | BloomStore | MemoryStore, urls: list[str], reference: bool = False
) -> list[object]:
    out: list[object] = []
    for url in urls:
        try:
            out.append(store._contains_slow(url) if reference else url in store)
        except InvalidURL:
            out.append(InvalidURL)
    return out


@pytest.mark.parametrize("kind", ["exact", "bloom", "memory"])
@pytest.mark.parametrize("profile", [FILTER, CRAWLER], ids=["filter", "crawler"])
def test_single_adds_match_the_reference_and_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, profile: Profile
) -> None:
    urls = _urls(np.random.default_rng(7), 1500)
    valid = [u for u in urls if not u.startswith("javascript")]
    (tmp_path / "c").mkdir()
    (tmp_path / "p").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "l").mkdir()
    with _store(kind, tmp_path / "c", profile) as store:  # lock-free adds
        compiled = _one_by_one(store, urls)
        held_c = _held(store, urls)
        count_c = len(store)
    with _store(kind, tmp_path / "l", profile, locked=True) as store:  # under the file lock
        assert _one_by_one(store, urls) == compiled
        assert _held(store, urls) == held_c
        assert len(store) == count_c
    with monkeypatch.context() as m:  # the Python reference of the single path
        m.setattr(exact, "_exact_add_locked", None)
        m.setattr(bloom, "_bloom_add_locked", None)
        with _store(kind, tmp_path / "p", profile) as store:
            store._key = None  # type: ignore[union-attr]
            if kind == "memory":
                store._key = lambda url: None  # type: ignore[union-attr]
            if kind == "bloom":
                store._fp = store._fingerprint  # type: ignore[union-attr]
            else:
                store._fp = lambda url: _reference_or_raise(url, profile)  # type: ignore[union-attr]
            reference = _one_by_one(store, urls, reference=True)
            held_p = _held(store, urls, reference=True)
            count_p = len(store)
    with _store(kind, tmp_path / "b", profile) as store:
        batch = store.add_many(valid[:700]) + store.add_many(valid[700:])
        held_b = store.contains_many(valid)
    assert compiled == reference
    assert held_c == held_p
    assert count_c == count_p
    assert [f for f in compiled if f is not InvalidURL] == batch
    assert held_b == [h for h, u in zip(held_c, urls, strict=True) if u in valid]
    assert all(held_c[i] is True for i, u in enumerate(urls) if u in valid)


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_a_dirty_file_is_left_to_the_python_session(tmp_path: Path, kind: str) -> None:
    """A writer killed mid-update leaves the dirty word set: the compiled add changes
    nothing then, and the Python session repairs the file and adds."""
    with _store(kind, tmp_path, FILTER) as store:
        assert store.add("http://a.example/1")
        store._mv[W_DIRTY] = 1  # as a dead writer leaves it
        if kind == "exact":
            probe = store._probe
            assert probe is not None
            key = fingerprint64("http://a.example/2") or 1
            got = speedups.exact_add_locked(probe[0], store._fd, key, probe[1], probe[2])
            assert got == -2 and store._mv[W_COUNT] == 1
        assert store.add("http://a.example/2")
        assert store._mv[W_DIRTY] == 0
        assert not store.add("http://a.example/2")
        assert "http://a.example/2" in store and len(store) == 2
        store.verify()


def test_a_retired_exact_file_is_followed(tmp_path: Path) -> None:
    """Another handle grows the table (the file is replaced): the compiled calls of the
    first handle see the retired word and the session reopens the grown file."""
    path = str(tmp_path / "s.exact")
    with ExactStore(path, capacity=64) as a, ExactStore(path) as b:
        assert a.add("http://x.example/0")
        b.add_many([f"http://y.example/{i}" for i in range(2000)])  # grows: a's file retired
        assert "http://y.example/1999" in a
        assert a.add("http://x.example/1")
        assert not b.add("http://x.example/1")
        assert len(a) == len(b) == 2002


@pytest.mark.parametrize(
    "call",
    [
        lambda w: speedups.exact_add_locked(w, -1, 0, 1, 1),  # key 0
        lambda w: speedups.exact_add_locked(w, -1, 5, 10**6, 1),  # table past the file
        lambda w: speedups.exact_add_locked(w[:100], -1, 5, 1, 1),  # no header
        lambda w: speedups.exact_add_locked(w, -5, 5, 1, 1),  # not an fd
        lambda w: speedups.bloom_add_locked(w, -1, np.zeros((1, 5), np.int64), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 10**6, 1, 1, 40]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 1, 3, 1, 40]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, np.array([[512, 1, 1, 1, 9999]]), 1, 2),
        lambda w: speedups.bloom_add_locked(w, -1, b"", 1, 2),
    ],
)
def test_the_locked_calls_refuse_what_is_not_a_store_file(call: object) -> None:
    words = np.zeros(1024, dtype=np.uint64)
    with pytest.raises(ValueError):
        call(words)  # type: ignore[operator]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(min_size=0, max_size=9000), key=st.integers(1, 2**64 - 1))
def test_the_locked_calls_on_arbitrary_bytes(data: bytes, key: int) -> None:
    """Whatever the words hold, a lookup reads inside them only (sanitizer run)."""
    size = (len(data) // 64) * 64
    words = np.frombuffer(data[:size], dtype=np.uint64).copy() if size else np.zeros(0, np.uint64)
    layers = np.array([[512, max(1, size // 64 - 64), 1, 1 << 40, 40]])
    for call in (
        lambda: speedups.exact_add_locked(words, -1, key, max(1, size // 64 - 64), 1),
        lambda: speedups.bloom_add_locked(words, -1, layers, key, key),
        # the lock-free adds write (into this copy) wherever the header lets them
        lambda: speedups.exact_add_locked(words, -2, key, max(1, size // 64 - 64), 1 << 40),
        lambda: speedups.bloom_add_locked(words, -2, layers, key, key),
        lambda: speedups.store_session(words, 1),
        lambda: speedups.store_session(words, 3, 40),
    ):
        try:
            got = call()
        except ValueError:
            continue
        assert got in (-2, 0, 1)


def test_bloom_contains_fingerprint_is_the_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64, size=(3000, 2), dtype=np.uint64)
    with BloomStore(str(tmp_path / "f.bloom"), capacity=800, error=0.01) as store:
        store.add_fingerprints(fps[:1500])  # two layers and more
        want = store.contains_fingerprints(fps).tolist()
        got = [store.contains_fingerprint((int(a), int(b))) for a, b in fps]
        assert got == want
        assert all(got[:1500])
        assert sum(got[1500:]) < 200  # mostly misses (a few false positives)


# ------------------------------------------- SeenSingle: a store's add and in in one C call

#: A profile off the compiled path (its host steps are not the default ones; the same
#: canonical form): its stores bind nothing, and every call is the Python method.
OFF_PATH = Profile("offpath", 1, host_steps=(*DEFAULT_HOST_STEPS, lambda host: host))


class _StrSub(str):
    """A str subclass: never on the compiled path (the Python method decides)."""


_ANY = st.one_of(
    _URLS,
    _URLS.map(_StrSub),
    st.sampled_from(["http://a.example/x", "HTTP://A.example:80/x", "a.example/x?b=1&a=2"]),
    st.integers(-5, 2**70),
    st.none(),
    st.binary(max_size=20),
)


def _outcome(call: Callable[[object], object], arg: object) -> object:
    try:
        return call(arg)
    except Exception as exc:  # the same error type from both
        return type(exc)


@settings(max_examples=120, deadline=None)
@given(
    ops=st.lists(st.tuples(st.booleans(), _ANY), max_size=40),
    kind=st.sampled_from(["exact", "bloom", "memory"]),
    which=st.sampled_from([0, 1, 2]),
)
@example(
    ops=[(True, "http://a.example/x"), (False, "a.example/x"), (True, 5)],
    kind="exact",
    which=0,
)
def test_the_compiled_add_and_in_are_their_reference(
    ops: list[tuple[bool, object]], kind: str, which: int
) -> None:
    """Arbitrary input (URLs, str subclasses, not str at all) through the compiled ``add``
    and ``in`` of one store and through the Python methods of another: the same answers,
    the same errors, the same contents."""
    profile = [FILTER, CRAWLER, OFF_PATH][which]
    assert MemoryStore.add is speedups.SeenSingle.add  # the classes' base is the compiled one
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "c").mkdir()
        (Path(tmp) / "r").mkdir()
        with (
            _store(kind, Path(tmp) / "c", profile) as fast,
            _store(kind, Path(tmp) / "r", profile) as ref,
        ):
            for adding, url in ops:
                if adding:
                    assert _outcome(fast.add, url) == _outcome(ref._add_slow, url), url  # type: ignore[arg-type]
                else:
                    got = _outcome(lambda u: u in fast, url)
                    assert got == _outcome(ref._contains_slow, url), url
            assert len(fast) == len(ref)
            for _, url in ops:
                assert _outcome(lambda u: u in fast, url) == _outcome(ref._contains_slow, url)


@pytest.mark.parametrize("kind", ["exact", "bloom", "memory"])
def test_a_closed_store_refuses_add_and_in_as_before(tmp_path: Path, kind: str) -> None:
    store = _store(kind, tmp_path, FILTER)
    assert store.add("http://a.example/x")
    store.close()
    for call in (lambda: store.add("http://a.example/x"), lambda: "http://a.example/x" in store):
        with pytest.raises(StoreClosed):
            call()
    # what the Python methods do on a closed store, the compiled calls do too
    for url in ("http://a.example/y", "javascript:x", 5, _StrSub("http://a.example/x")):
        assert _outcome(store.add, url) == _outcome(store._add_slow, url)  # type: ignore[arg-type]
        assert _outcome(lambda u: u in store, url) == _outcome(store._contains_slow, url)


def test_a_layer_another_handle_added_is_followed(tmp_path: Path) -> None:
    """Another handle grows the Bloom filter by layers: the compiled calls of the first see
    the layer count change, the Python session maps the new layers, and it binds them."""
    path = str(tmp_path / "s.bloom")
    with BloomStore(path, capacity=100, error=1e-7) as a, BloomStore(path) as b:
        assert a.add("http://x.example/0")
        urls = [f"http://y.example/{i}" for i in range(1000)]
        b.add_many(urls)
        assert len(b._layers) > len(a._layers)
        assert all(u in a for u in urls)  # the first after the growth remaps a
        assert len(a._layers) == len(b._layers)
        assert a.add("http://x.example/1")
        assert "http://x.example/1" in b and not b.add("http://x.example/1")
        assert len(a) == len(b) == 1002


def _added_in_child(store: ExactStore | BloomStore, url: str) -> int:
    pid = os.fork()
    if pid == 0:  # the child: its first add reopens the file (never the parent's lock)
        code = 1
        try:
            before = store._generation
            if (
                store.add(url)
                and url in store
                and not store.add(url)
                and store._generation == forks[0] != before
            ):
                code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_a_forked_child_adds_through_its_own_file(tmp_path: Path, kind: str) -> None:
    with _store(kind, tmp_path, FILTER) as store:
        assert store.add("http://p.example/0")
        assert _added_in_child(store, "http://c.example/1") == 0
        assert "http://c.example/1" in store and not store.add("http://c.example/1")
        assert store.add("http://p.example/2") and len(store) == 3


def _spin(path: str, ready: object, stop: object) -> None:
    store = ExactStore(path) if path.endswith(".exact") else BloomStore(path)
    with store:
        ready.set()  # type: ignore[attr-defined]
        while not stop.is_set():  # type: ignore[attr-defined]
            with store._writing:
                pass


@pytest.mark.parametrize("kind", ["exact", "bloom"])
def test_adds_that_overlap_locked_sections_are_redone(tmp_path: Path, kind: str) -> None:
    """Another process keeps entering and leaving locked sections while this one adds URLs
    one at a time: the compiled adds that saw a section start are redone under the lock
    (or left to the session), and every URL is found and counted once."""
    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / f"o.{kind}")
    store = (
        ExactStore(path, capacity=400_000)
        if kind == "exact"
        else BloomStore(path, capacity=400_000, error=1e-9)
    )
    with store:
        taken: list[str] = []
        ways = ("_add_locked" if kind == "exact" else "_redo", "add_fingerprint")
        for name in ways:  # count the ways off the compiled path
            method = getattr(store, name)

            def counted(
                *args: object, _m: Callable[..., object] = method, _n: str = name, **kw: object
            ) -> Any:
                taken.append(_n)
                return _m(*args, **kw)

            setattr(store, name, counted)
        ready, stop = ctx.Event(), ctx.Event()
        spinner = ctx.Process(target=_spin, args=(path, ready, stop))
        spinner.start()
        try:
            assert ready.wait(60)
            urls: list[str] = []
            news: list[bool] = []
            deadline = time.monotonic() + 30  # (a busy machine may not run the spinner at once)
            while len(urls) < 40_000 or (
                not taken and len(urls) < 300_000 and time.monotonic() < deadline
            ):
                more = [
                    f"http://h{i % 97}.example/p/{i}?q={i}"
                    for i in range(len(urls), len(urls) + 10_000)
                ]
                urls += more
                news += [store.add(u) for u in more]
        finally:
            stop.set()
            spinner.join()
        assert taken, "no add overlapped a section"
        assert all(news), [u for u, n in zip(urls, news, strict=True) if not n][:3]
        assert all(u in store for u in urls)
        assert len(store) == len(urls)
        if kind == "exact":
            assert len(store) == int(np.count_nonzero(store._table))
        store.verify()


def test_a_failed_bind_leaves_the_store_on_its_python_methods(tmp_path: Path) -> None:
    with ExactStore(str(tmp_path / "b.exact")) as store:
        assert store.add("http://a.example/1")
        key = (True, False, None)
        bad: list[tuple[object, ...]] = [
            (key,),
            (key, 9, None),
            ((True, False), 2, store._mm, 1, 1, True),
            (key, 1, frozenset()),
            (key, 2, np.zeros(10, np.uint64), 1, 1, False),  # no header
            (key, 2, store._mm, 0, 1, True),  # no table
            (key, 2, store._mm, 10**9, 1, True),  # past the file
            (key, 2, b"\0" * 8192, 1, 1, True),  # read-only words for adds
            (key, 3, store._mm, np.zeros((1, 5), np.int64), True),
            (key, 3, store._mm, np.array([[512, 10**9, 1, 1, 40]]), True),
            ((True, False, (True, (1,), (), True, True)), 2, store._mm, 1, 1, True),
        ]
        for args in bad:
            with pytest.raises((TypeError, ValueError, BufferError)):
                store._seen_bind(*args)
            # unbound: the Python methods answer
            assert "http://a.example/1" in store and not store.add("http://a.example/1")
        assert store.add("http://a.example/2") and len(store) == 2


class _Probe(speedups.SeenSingle):  # type: ignore[misc,name-defined]
    """The compiled base alone, its Python methods markers."""

    def _add_slow(self, url: object) -> str:
        return "slow"

    def _contains_slow(self, url: object) -> bool:
        return False

    def add_fingerprint(self, key: object) -> str:
        return "session"

    def contains_fingerprint(self, key: object) -> bool:
        return False

    def _add_locked(self, key: object, recount: bool) -> None:
        pass

    def _redo(self, index: int, h1: int, h2: int) -> None:
        pass


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=9000),
    url=st.sampled_from(["http://a.example/x", "b.example/y?z=1", "http://c.example/"]),
)
def test_the_compiled_calls_on_arbitrary_bytes(data: bytes, url: str) -> None:
    """Whatever the words hold, the bound probe reads and writes inside them only
    (sanitizer run); a store file's header words decide between the answers."""
    size = (len(data) // 64) * 64
    words = np.frombuffer(data[:size], dtype=np.uint64).copy() if size else np.zeros(0, np.uint64)
    blocks = max(1, size // 64 - 64)
    layers = np.array([[512, blocks, 1, 1 << 40, 40], [512, blocks, 2, 1 << 40, 41]])
    probe = _Probe()
    assert url not in probe and probe.add(url) == "slow"  # nothing bound
    for kind, target in ((2, (words, blocks, 1 << 40)), (3, (words, layers))):
        for addable in (False, True):
            try:
                probe._seen_bind((True, False, None), kind, *target, addable)
            except ValueError:
                continue
            assert (url in probe) in (True, False)
            assert probe.add(url) in (True, False, "session")
            probe._seen_bind(None)


def test_the_pure_python_build_has_the_same_stores() -> None:
    """Without the extension the stores' base is the reference (their Python methods)."""
    script = """
import tempfile
from urlsieve.exceptions import StoreClosed
from urlsieve.seen import open_seen
from urlsieve.seen._single import SeenSinglePy
d = tempfile.mkdtemp()
for spec in ("memory:", f"exact:{d}/s.exact", f"bloom:{d}/s.bloom"):
    s = open_seen(spec)
    assert SeenSinglePy in type(s).__mro__, type(s).__mro__
    assert s.add("http://a.example/x") and not s.add("HTTP://A.EXAMPLE/x")
    assert "a.example/x" in s and "http://b.example/" not in s and 5 not in s
    s.close()
    try:
        s.add("http://a.example/x")
    except StoreClosed:
        pass
    else:
        raise AssertionError(spec)
print("ok")
"""
    env = {**os.environ, "URLSIEVE_PURE_PYTHON": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
