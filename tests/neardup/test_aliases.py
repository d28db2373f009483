"""Seed 004's two IDs per URL, alias candidates and their confirmation by content.

Against a real DNS server (dnsmasq on loopback) where the seed's pitfalls
need one: shared hosting (unrelated sites on one address) and a name whose
address changes.
"""

from __future__ import annotations

import hashlib
import random

import pytest

from tests.neardup.dns_fixtures import DnsServer, ManualClock
from urlsieve.exceptions import InvalidURL, ResolveError
from urlsieve.fingerprint import signature
from urlsieve.neardup import (
    AliasTracker,
    DNSResolver,
    MemoryIndex,
    MirrorDetector,
    StaticResolver,
    ip_url,
    simhash,
    url_ids,
)
from urlsieve.url import CRAWLER, parse_url


def test_url_ids_name_and_ip_forms() -> None:
    resolver = StaticResolver({"www.example.test": ["192.0.2.1", "2001:db8::5"]})
    ids = url_ids("HTTP://WWW.Example.TEST:8080/a/../b?y=2&x=1#f", resolver)
    assert ids.url == "http://www.example.test:8080/b?x=1&y=2"
    assert ids.addresses == ("192.0.2.1", "2001:db8::5")
    assert ids.ip_urls == ("http://192.0.2.1:8080/b?x=1&y=2", "http://[2001:db8::5]:8080/b?x=1&y=2")
    assert ids.name_id == signature(ids.url, "xxh128", CRAWLER)
    assert len(ids.name_id) == 16 and all(len(i) == 16 for i in ids.ip_ids)
    seed = url_ids("http://www.example.test/b", resolver, kind="md5")
    assert seed.name_id == hashlib.md5(b"http://www.example.test/b").digest()
    assert seed.ip_ids[0] == hashlib.md5(b"http://192.0.2.1/b").digest()
    assert url_ids("http://nowhere.test/", resolver).ip_ids == ()
    assert ip_url(parse_url("https://h.test/x"), "::1") == "https://[::1]/x"
    with pytest.raises(InvalidURL):
        url_ids("javascript:1", resolver)


def test_alias_names_of_one_address_share_an_ip_id(dns_server: DnsServer) -> None:
    dns_server.set_hosts({"www.nuist.test": "127.0.0.9", "nuist.test": "127.0.0.9"})
    resolver = DNSResolver(["127.0.0.1"], port=dns_server.port)
    a = url_ids("http://www.nuist.test/index.html", resolver, kind="md5")
    b = url_ids("http://nuist.test/index.html", resolver, kind="md5")
    assert a.name_id != b.name_id
    assert a.ip_ids == b.ip_ids == (hashlib.md5(b"http://127.0.0.9/index.html").digest(),)


def _pages(rnd: random.Random, n: int) -> list[int]:
    return [rnd.getrandbits(64) for _ in range(n)]


def _flip(value: int, bits: int, rnd: random.Random) -> int:
    for bit in rnd.sample(range(64), bits):
        value ^= 1 << bit
    return value


def test_the_seed_rules_and_confirmation_by_content(dns_server: DnsServer) -> None:
    """Same name ID: duplicate. Same IP ID only: candidate, fetched. Content confirms."""
    dns_server.set_hosts(
        {
            "www.site.test": "127.0.0.1",
            "alias.site.test": "127.0.0.1",  # the same site under another name
            "other.site.test": "127.0.0.1",  # shared hosting: another site, same address
        }
    )
    tracker = AliasTracker(DNSResolver(["127.0.0.1"], port=dns_server.port))
    rnd = random.Random(4)
    content = _pages(rnd, 10)
    for i in range(10):
        assert tracker.see(f"http://www.site.test/p{i}").verdict == "new"
        tracker.observe(f"http://www.site.test/p{i}", content[i])
    assert tracker.see("http://WWW.SITE.TEST/p0#x").verdict == "duplicate"

    first = tracker.see("http://alias.site.test/p0")
    assert (first.verdict, first.alias_of) == ("candidate", "www.site.test")
    assert tracker.see("http://other.site.test/p0").verdict == "candidate"
    for i in range(3):  # the candidates are fetched; their content decides
        if i:
            assert tracker.see(f"http://alias.site.test/p{i}").verdict == "candidate"
            assert tracker.see(f"http://other.site.test/p{i}").verdict == "candidate"
        tracker.observe(f"http://alias.site.test/p{i}", _flip(content[i], 2, rnd))
        tracker.observe(f"http://other.site.test/p{i}", rnd.getrandbits(64))
        if i < 2:
            assert tracker.detector.alias_of("alias.site.test") is None  # not before 3 pairs

    assert tracker.detector.alias_of("alias.site.test") == "www.site.test"
    assert tracker.detector.alias_of("other.site.test") is None  # an address alone never merges
    decision = tracker.detector.decision("alias.site.test", "www.site.test")
    assert decision is not None and decision.confirmed
    assert [p.distance for p in decision.agree] == [2, 2, 2]
    assert "3 of 3 same-location pages within 10 bits" in decision.reason
    shared = tracker.detector.decision("other.site.test", "www.site.test")
    assert shared is not None and not shared.confirmed and len(shared.disagree) == 3

    # The alias's remaining URLs are the original's: already seen, not fetched again.
    later = tracker.see("http://alias.site.test/p7")
    assert (later.verdict, later.url, later.aliased) == (
        "duplicate",
        "http://www.site.test/p7",
        True,
    )
    assert tracker.see("http://alias.site.test/new-page").verdict == "new"
    assert tracker.see("http://www.site.test/new-page").verdict == "duplicate"
    assert tracker.see("http://other.site.test/p7").verdict == "candidate"
    assert tracker.counts["candidate"] >= 6


def test_a_name_whose_address_changes(dns_server: DnsServer) -> None:
    dns_server.set_hosts({"www.site.test": "127.0.0.1", "mirror.site.test": "127.0.0.1"})
    clock = ManualClock()
    resolver = DNSResolver(["127.0.0.1"], port=dns_server.port, clock=clock)
    tracker = AliasTracker(resolver, detector=MirrorDetector(min_pairs=2))
    for i in range(4):
        tracker.see(f"http://www.site.test/{i}")
        tracker.observe(f"http://www.site.test/{i}", 1000 + i)
    for i in range(2):
        assert tracker.see(f"http://mirror.site.test/{i}").verdict == "candidate"
        tracker.observe(f"http://mirror.site.test/{i}", 1000 + i)
    assert tracker.detector.alias_of("mirror.site.test") == "www.site.test"
    assert tracker.see("http://mirror.site.test/3").verdict == "duplicate"

    # The name is sold: it moves to another server with other content.
    dns_server.set_hosts({"www.site.test": "127.0.0.1", "mirror.site.test": "127.0.0.77"})
    assert tracker.see("http://mirror.site.test/extra").verdict == "new"  # cached: still aliased
    clock.now += 2  # past the 1 s TTL
    moved = tracker.see("http://mirror.site.test/fresh")
    assert moved.addresses == ("127.0.0.77",)
    assert tracker.counts["moved"] == 1
    assert tracker.detector.alias_of("mirror.site.test") is None  # suspended, evidence dropped
    decision = tracker.detector.decision("mirror.site.test", "www.site.test")
    assert decision is not None and not decision.confirmed and not decision.agree
    assert "addresses changed" in decision.reason
    # Its pages are its own again: fetched, not folded into www.site.test.
    assert tracker.see("http://mirror.site.test/3").verdict == "new"


def test_dns_failure_does_not_drop_the_url() -> None:
    class Failing:
        def resolve(self, host: str) -> tuple[str, ...]:
            raise ResolveError(host, "timed out")

    tracker = AliasTracker(Failing())
    seen = tracker.see("http://a.test/")
    assert seen.verdict == "new" and seen.resolve_error is not None
    assert tracker.see("http://a.test/").verdict == "duplicate"
    assert tracker.counts["resolve_errors"] == 2  # each sighting asked again


def test_disagreeing_content_withdraws_an_alias() -> None:
    detector = MirrorDetector(min_pairs=2, min_ratio=0.75)
    resolver = StaticResolver({"a.test": "10.0.0.1", "b.test": "10.0.0.1"})
    tracker = AliasTracker(resolver, detector=detector)
    for i in range(8):
        tracker.see(f"http://a.test/{i}")
        tracker.observe(f"http://a.test/{i}", i << 20)
    for i in range(2):
        tracker.see(f"http://b.test/{i}")
        tracker.observe(f"http://b.test/{i}", i << 20)
    assert detector.alias_of("b.test") == "a.test"
    detector.observe(parse_url("http://b.test/5", CRAWLER), (1 << 64) - 1)  # 62 bits: differs
    assert detector.alias_of("b.test") is None
    decision = detector.decision("a.test", "b.test")
    assert decision is not None and "2 of 3" in decision.reason


def test_detector_rejects_bad_thresholds() -> None:
    with pytest.raises(ValueError):
        MirrorDetector(distance=65)
    with pytest.raises(ValueError):
        MirrorDetector(min_pairs=0)
    with pytest.raises(ValueError):
        MirrorDetector(min_ratio=0)


BANNER = "this is an official mirror of the original site kept in sync every night"


def _text_pages(rnd: random.Random, n: int, words: int = 250) -> list[str]:
    vocab = [f"w{i}" for i in range(20_000)]
    return [" ".join(rnd.choices(vocab, k=words)) for _ in range(n)]


def test_a_mirror_that_adds_a_banner_to_every_page_is_confirmed() -> None:
    """A one-line banner of 14 words moves each page's SimHash by a few bits: the default
    distance (10) confirms the mirror; 3 bits (the old default) saw too few pages agree."""
    rnd = random.Random(4)
    pages = _text_pages(rnd, 12)
    decided = {}
    for distance in (3, 10):
        detector = MirrorDetector(distance=distance) if distance != 10 else MirrorDetector()
        for i, page in enumerate(pages):
            detector.observe(f"http://www.orig.test/p{i}", simhash(page))
            detector.observe(f"http://mirror.test/p{i}", simhash(f"{BANNER}\n{page}"))
        detector.add_candidate("mirror.test", "www.orig.test")
        decided[distance] = detector.alias_of("mirror.test")
    assert decided[10] == "www.orig.test"
    assert decided[3] is None
    # A different site at the same paths is not a mirror at 10 bits either.
    detector = MirrorDetector()
    other = _text_pages(rnd, 12)
    for i, page in enumerate(pages):
        detector.observe(f"http://www.orig.test/p{i}", simhash(page))
        detector.observe(f"http://other.test/p{i}", simhash(f"{BANNER}\n{other[i]}"))
    detector.add_candidate("other.test", "www.orig.test")
    assert detector.alias_of("other.test") is None


def test_hosts_paired_through_the_index_compare_every_page_they_share() -> None:
    """One page found by the index (within its k) pairs two hosts on different addresses;
    the pages seen before are compared then, at the detector's distance."""
    rnd = random.Random(8)
    pages = [rnd.getrandbits(64) for _ in range(4)]
    index = MemoryIndex(k=3)
    detector = MirrorDetector(index=index)
    assert detector.search == 3 and MirrorDetector(distance=2, index=index).search == 2
    for i, fp in enumerate(pages):
        detector.observe(f"http://www.orig.test/p{i}", fp)
    for i, fp in enumerate(pages[:3]):  # 6 bits apart: beyond the index's k, within 10
        detector.observe(f"http://copy.test/p{i}", _flip(fp, 6, rnd))
    assert detector.decision("copy.test", "www.orig.test") is None  # not paired yet
    assert detector.observe("http://copy.test/p3", _flip(pages[3], 1, rnd))  # found: paired
    decision = detector.decision("copy.test", "www.orig.test")
    assert decision is not None and len(decision.agree) == 4 and decision.confirmed
    assert sorted(p.distance for p in decision.agree) == [1, 6, 6, 6]
