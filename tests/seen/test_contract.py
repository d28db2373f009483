"""One contract, every seen-store backend (STYLE.md §3)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.seen.cases import CASES, StoreCase
from urlsieve import InvalidURL
from urlsieve.seen import SeenStore, open_seen


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request: pytest.FixtureRequest) -> StoreCase:
    param: StoreCase = request.param
    return param


@pytest.fixture
def spec(case: StoreCase, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return case.spec(request, tmp_path)


def urls(n: int, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [f"http://h{rnd.randrange(10**9)}.example.com/p/{i}?q={rnd.random()}" for i in range(n)]


def test_store_satisfies_the_protocol(spec: str) -> None:
    with open_seen(spec) as store:
        assert isinstance(store, SeenStore)


def test_add_reports_new_once(spec: str) -> None:
    with open_seen(spec) as store:
        assert store.add("http://example.com/a") is True
        assert store.add("http://example.com/a") is False
        assert "http://example.com/a" in store
        assert "http://example.com/b" not in store


def test_equivalent_spellings_are_one_url(spec: str) -> None:
    with open_seen(spec) as store:
        assert store.add("HTTP://WWW.Example.COM:80/a/./b/../c#frag") is True
        assert store.add("http://www.example.com/a/c") is False
        assert "http://www.example.com/a/%63" in store


def test_add_many_flags_in_order_and_repeats_inside_a_batch(spec: str) -> None:
    with open_seen(spec) as store:
        store.add("http://x.example/1")
        batch = ["http://x.example/1", "http://x.example/2", "http://x.example/2", "x.example/3"]
        assert store.add_many(batch) == [False, True, False, True]
        assert store.contains_many(["http://x.example/3", "http://x.example/4"]) == [True, False]
        assert store.add_many([]) == []
        assert store.contains_many([]) == []


def test_invalid_url_raises_and_a_bad_batch_adds_nothing(spec: str) -> None:
    with open_seen(spec) as store:
        with pytest.raises(InvalidURL):
            store.add("javascript:alert(1)")
        with pytest.raises(InvalidURL):
            store.add_many(["http://ok.example/1", "http://"])
        assert "http://ok.example/1" not in store
        assert len(store) == 0


def test_no_false_negatives_and_len(case: StoreCase, spec: str) -> None:
    batch = urls(20_000)
    with open_seen(spec) as store:
        new = store.add_many(batch[:10_000])
        for u in batch[10_000:12_000]:
            store.add(u)
        assert all(store.contains_many(batch[:12_000]))
        if case.exact:
            assert all(new)
            assert len(store) == 12_000
            assert not any(store.contains_many(batch[12_000:]))
        else:
            assert 11_900 <= len(store) <= 12_100


def test_stats_are_coherent(case: StoreCase, spec: str) -> None:
    with open_seen(spec) as store:
        store.add_many(urls(1000))
        stats = store.stats()
        assert stats.exact is case.exact
        assert stats.profile == store.profile.ident
        assert stats.bytes_used > 0
        if case.exact:
            assert stats.count == 1000
            assert stats.false_positive_rate == 0
        else:
            assert 0 <= stats.false_positive_rate < 1
            assert stats.expected_false_positives >= 0
        assert stats.as_dict()["backend"] == stats.backend


def test_reopening_keeps_urls_exactly_when_persistent(case: StoreCase, spec: str) -> None:
    batch = urls(5000, seed=7)
    with open_seen(spec) as store:
        store.add_many(batch)
        store.flush()
    with open_seen(spec) as store:
        if case.persistent:
            assert all(store.contains_many(batch))
            assert store.add(batch[0]) is False
        else:
            assert len(store) == 0
            assert not any(store.contains_many(batch))


def test_a_closed_store_raises_store_closed_for_everything(spec: str) -> None:
    from urlsieve import StoreClosed

    store = open_seen(spec)
    store.add("http://example.com/a")
    store.close()
    store.close()  # twice is fine
    operations = [
        lambda: store.add("http://example.com/b"),
        lambda: store.add_many(["http://example.com/c"]),
        lambda: "http://example.com/a" in store,
        lambda: store.contains_many(["http://example.com/a"]),
    ]
    for operation in operations:
        with pytest.raises(StoreClosed):
            operation()
