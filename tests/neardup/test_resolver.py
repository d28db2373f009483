"""Resolvers: a static table, and real DNS against dnsmasq on loopback (dns_fixtures.py)."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.neardup.dns_fixtures import DnsServer, ManualClock
from urlsieve.exceptions import ConfigError, ResolveError
from urlsieve.neardup import (
    AsyncDNSResolver,
    DNSResolver,
    Resolver,
    StaticResolver,
    open_resolver,
)


def test_static_resolver() -> None:
    r = StaticResolver({"a.example": "10.0.0.2", "B.Example.": ["10.0.0.1", "::ffff:10.0.0.9"]})
    assert isinstance(r, Resolver)
    assert r.resolve("a.example") == ("10.0.0.2",)
    assert r.resolve("b.example") == ("10.0.0.1", "::ffff:a00:9")
    assert r.resolve("B.EXAMPLE.") == r.resolve("b.example")
    assert r.resolve("unknown.example") == ()
    assert r.resolve("192.0.2.7") == ("192.0.2.7",)
    assert r.resolve("[2001:db8::1]") == ("2001:db8::1",)
    r.set("a.example", ["10.0.0.3"])
    assert r.resolve("a.example") == ("10.0.0.3",)
    r.remove("a.example")
    assert r.resolve("a.example") == ()
    with pytest.raises(ValueError):
        r.set("bad.example", "not-an-address")


def test_dns_every_address_sorted_and_nxdomain(dns_server: DnsServer) -> None:
    dns_server.set_hosts(
        {"www.site.test": ["127.0.0.2", "127.0.0.1", "::1"], "v4.site.test": "127.0.0.5"}
    )
    r = DNSResolver(["127.0.0.1"], port=dns_server.port, timeout=2)
    assert r.resolve("www.site.test") == ("127.0.0.1", "127.0.0.2", "::1")
    assert r.resolve("WWW.Site.Test.") == ("127.0.0.1", "127.0.0.2", "::1")
    assert r.resolve("v4.site.test") == ("127.0.0.5",)
    assert r.resolve("nobody.site.test") == ()  # NXDOMAIN: no address, not an error
    assert DNSResolver(["127.0.0.1"], port=dns_server.port, ipv6=False).resolve(
        "www.site.test"
    ) == ("127.0.0.1", "127.0.0.2")
    assert r.resolve("10.9.8.7") == ("10.9.8.7",)


def test_dns_failures_are_resolve_errors(dns_server: DnsServer) -> None:
    r = DNSResolver(["127.0.0.1"], port=dns_server.port, timeout=2)
    with pytest.raises(ResolveError, match=r"example\.com.*SERVFAIL or refused"):
        r.resolve("example.com")  # dnsmasq has no upstream: refused
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # a server that never answers
        silent.bind(("127.0.0.1", 0))
        dead = DNSResolver(["127.0.0.1"], port=silent.getsockname()[1], timeout=0.3)
        with pytest.raises(ResolveError, match="timed out"):
            dead.resolve("www.site.test")
    with pytest.raises(ResolveError, match="not a host name"):
        r.resolve("a" * 300)
    with pytest.raises(ResolveError):
        r.resolve("bad..name.test")


def test_answers_are_cached_for_their_ttl(dns_server: DnsServer) -> None:
    dns_server.set_hosts({"moving.site.test": "127.0.0.1"})
    clock = ManualClock(1000.0)
    r = DNSResolver(["127.0.0.1"], port=dns_server.port, clock=clock, negative_ttl=30)
    assert r.resolve("moving.site.test") == ("127.0.0.1",)
    assert r.resolve("gone.site.test") == ()
    dns_server.set_hosts({"moving.site.test": "127.0.0.7", "gone.site.test": "127.0.0.8"})
    assert r.resolve("moving.site.test") == ("127.0.0.1",)  # dnsmasq's TTL is 1 s
    clock.now += 1.01
    assert r.resolve("moving.site.test") == ("127.0.0.7",)
    assert r.resolve("gone.site.test") == ()  # the negative answer lives 30 s
    clock.now += 30
    assert r.resolve("gone.site.test") == ("127.0.0.8",)
    assert r.cache.hits >= 2


def test_min_ttl_and_a_bounded_cache(dns_server: DnsServer) -> None:
    dns_server.set_hosts({f"h{i}.site.test": f"127.0.1.{i}" for i in range(10)})
    clock = ManualClock(1000.0)
    r = DNSResolver(["127.0.0.1"], port=dns_server.port, clock=clock, min_ttl=60, max_entries=4)
    for i in range(10):
        assert r.resolve(f"h{i}.site.test") == (f"127.0.1.{i}",)
    assert len(r.cache._entries) == 4
    dns_server.set_hosts({"h9.site.test": "127.0.2.9"})
    clock.now += 30
    assert r.resolve("h9.site.test") == ("127.0.1.9",)  # kept 60 s despite dnsmasq's 1 s


def test_async_resolver(dns_server: DnsServer) -> None:
    dns_server.set_hosts({"a.site.test": ["127.0.0.1", "::1"]})
    r = AsyncDNSResolver(["127.0.0.1"], port=dns_server.port, timeout=2)

    async def run() -> list[tuple[str, ...]]:
        return list(
            await asyncio.gather(
                r.aresolve("a.site.test"), r.aresolve("none.site.test"), r.aresolve("::1")
            )
        )

    assert asyncio.run(run()) == [("127.0.0.1", "::1"), (), ("::1",)]
    with pytest.raises(ResolveError):
        asyncio.run(r.aresolve("example.org"))


def test_open_resolver_specs(dns_server: DnsServer) -> None:
    dns_server.set_hosts({"a.site.test": "127.0.0.1"})
    r = open_resolver(f"dns://127.0.0.1:{dns_server.port}?timeout=1.5&max_ttl=10")
    assert isinstance(r, DNSResolver)
    assert r.timeout == 1.5
    assert r.resolve("a.site.test") == ("127.0.0.1",)
    assert isinstance(open_resolver("system:"), DNSResolver)
    assert open_resolver("static:", table={"x.test": "10.1.1.1"}).resolve("x.test") == ("10.1.1.1",)
    for bad, message in [
        ("dns", "write 'system:'"),
        ("ldap://x", "unknown kind"),
        ("dns://127.0.0.1?ttl=3", "unknown parameter 'ttl'"),
        ("dns://127.0.0.1?timeout=soon", "timeout='soon' is not a valid float"),
        ("dns://nameserver.example", "does not appear to be an IPv4 or IPv6"),
        ("dns://127.0.0.1?timeout=0", "timeout must be positive"),
    ]:
        with pytest.raises(ConfigError, match=message):
            open_resolver(bad)


@settings(max_examples=150)
@given(host=st.text(max_size=300) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_hostile_names_resolve_or_raise_resolve_error(host: str) -> None:
    with contextlib.suppress(ResolveError):
        StaticResolver({"a.test": "10.0.0.1"}).resolve(host)


def test_hostile_names_through_real_dns(dns_server: DnsServer) -> None:
    r = DNSResolver(["127.0.0.1"], port=dns_server.port, timeout=1)
    for host in ["\x00", "a\x00b.test", "é.test", "-.test", "." * 5, "a" * 64 + ".test", "ü" * 90]:
        with contextlib.suppress(ResolveError):
            assert isinstance(r.resolve(host), tuple)
