"""The SSRF guard: every forbidden address class, IPv6 forms of IPv4, URL host spellings,
names that resolve to forbidden addresses, and real fetches refused before any connection.

No test connects to a non-loopback address: public addresses are checked as values."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.learn.origin import Origin, Route, origin_server
from urlsieve.exceptions import ConfigError
from urlsieve.learn import guard as guard_module
from urlsieve.learn.crawl import Crawler, CrawlSettings
from urlsieve.learn.guard import AddressRefused, Guard, GuardedResolver, forbidden

FORBIDDEN = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("fd12:3456::1", "unique local"),
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("224.0.0.251", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("0.1.2.3", "this network"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("100.64.0.1", "CGNAT"),
    ("192.0.2.1", "documentation"),
    ("2001:db8::1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, which is loopback"),
    ("::ffff:10.1.1.1", "IPv4-mapped form of 10.1.1.1, which is private"),
    ("::127.0.0.1", "IPv4-compatible"),
    ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, which is link-local"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("2002:7f00:1::1", "6to4 form of 127.0.0.1, which is loopback"),
    ("2001::1", "Teredo"),
    ("100::1", "discard-only"),
    ("fec0::1", "site-local"),
]


@pytest.mark.parametrize(("address", "why"), FORBIDDEN)
def test_every_forbidden_class_is_refused_with_a_reason(address: str, why: str) -> None:
    reason = Guard().check(address)
    assert reason is not None
    assert why in reason
    assert reason.startswith(address.partition("%")[0].split(":ffff:")[0][:2])  # names it


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "1.1.1.1"]
)
def test_public_addresses_pass(address: str) -> None:
    assert Guard().check(address) is None


def test_allow_networks_opens_exactly_those() -> None:
    guard = Guard(["127.0.0.0/8", "fd00::/8"])
    assert guard.check("127.0.0.1") is None
    assert guard.check("::ffff:127.0.0.1") is None  # the IPv4 inside is what is allowed
    assert guard.check("fd00::5") is None
    assert guard.check("10.0.0.1") is not None
    assert guard.check("::1") is not None
    with pytest.raises(ConfigError, match="not a network"):
        Guard(["localhost"])


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "0x7f.1", "[::1]",
     "[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]", "0.0.0.0", "0", "127.0.0.1."],
)  # fmt: skip
def test_url_host_spellings_are_read_like_the_canonicaliser(host: str) -> None:
    reason = Guard().check_host(host)
    assert reason is not None and ("loopback" in reason or "unspecified" in reason)


def test_names_pass_check_host() -> None:
    assert Guard().check_host("example.com") is None


@given(st.integers(0, 2**32 - 1))
def test_any_decimal_spelling_agrees_with_the_dotted_quad(number: int) -> None:
    guard = Guard()
    dotted = ".".join(str((number >> s) & 0xFF) for s in (24, 16, 8, 0))
    assert guard.check_host(str(number)) == guard.check_host(dotted)
    assert guard.check_host(hex(number)) == guard.check_host(dotted)


def _resolve(resolver: GuardedResolver, host: str, family: int = socket.AF_UNSPEC) -> list[str]:
    async def go() -> list[str]:
        return [r["host"] for r in await resolver.resolve(host, 80, socket.AddressFamily(family))]

    return asyncio.run(go())


def test_a_name_with_a_mix_of_public_and_private_addresses_is_refused() -> None:
    resolver = GuardedResolver(
        Guard(),
        hosts={
            "mixed.test": ("93.184.216.34", "10.0.0.1"),
            "public.test": ("93.184.216.34", "2606:2800:220:1::1"),
            "rebind.test": ("8.8.8.8", "::ffff:192.168.0.1"),
        },
    )
    with pytest.raises(AddressRefused) as info:
        _resolve(resolver, "mixed.test")
    assert "mixed.test resolves to 2 addresses, one of them 10.0.0.1" in info.value.reason
    with pytest.raises(AddressRefused, match=re.escape("192.168.0.1")):
        _resolve(resolver, "rebind.test")
    # Only checked addresses are handed to aiohttp, filtered by the family it asks for.
    assert _resolve(resolver, "public.test") == ["93.184.216.34", "2606:2800:220:1::1"]
    assert _resolve(resolver, "PUBLIC.test.", socket.AF_INET) == ["93.184.216.34"]
    assert resolver.refused == 2


def test_the_resolver_refuses_literals_and_unknown_static_names_go_to_dns() -> None:
    resolver = GuardedResolver(Guard(), hosts={"a.test": "127.0.0.1"})
    with pytest.raises(AddressRefused, match=re.escape("127.0.0.1 is loopback")):
        _resolve(resolver, "127.0.0.1")
    with pytest.raises(
        AddressRefused, match=re.escape("a.test resolves to 127.0.0.1, which is loopback")
    ):
        _resolve(resolver, "a.test")
    with pytest.raises(ConfigError):
        GuardedResolver(Guard(), hosts={"b.test": "not an ip"})


def _settings(**kw: object) -> CrawlSettings:
    values: dict[str, object] = {"timeout": 5.0, "hosts": {"site.test": "127.0.0.1"}}
    values.update(kw)
    return CrawlSettings(**values)  # type: ignore[arg-type]


async def _fetch_all(settings: CrawlSettings, urls: list[str]) -> list[tuple[str, str]]:
    async with Crawler(settings) as crawler:
        return [((f := await crawler.fetch(u)).outcome, f.reason) for u in urls]


def test_loopback_is_refused_unless_allowed_and_the_origin_sees_nothing() -> None:
    with origin_server() as origin:
        port = origin.port
        urls = [
            f"http://127.0.0.1:{port}/en/clean.html",
            f"http://site.test:{port}/en/clean.html",
            f"http://evil@127.0.0.1:{port}/en/clean.html",
            f"http://127.1:{port}/en/clean.html",
            f"http://0x7f000001:{port}/en/clean.html",
            f"http://2130706433:{port}/en/clean.html",
            f"http://[::ffff:127.0.0.1]:{port}/en/clean.html",
            f"http://[::1]:{port}/en/clean.html",
        ]
        results = asyncio.run(_fetch_all(_settings(), urls))
        assert [outcome for outcome, _ in results] == ["refused"] * len(urls)
        assert all("loopback" in reason for _, reason in results), results
        assert origin.hits == []
        allowed = asyncio.run(_fetch_all(_settings(allow_networks=("127.0.0.0/8",)), urls[:5]))
        assert [outcome for outcome, _ in allowed] == ["page"] * 5
        assert origin.fetched("/en/clean.html") == 5


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://10.0.0.1/", "10.0.0.1 is private"),
        ("http://[::1]/", "::1 is loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://0x0a000001/", "10.0.0.1 is private"),
        ("http://user@[::ffff:10.0.0.1]:8080/", "10.0.0.1 is private"),
        ("http://inside.test/", "inside.test resolves to 192.168.1.1, which is private"),
        ("file:///etc/passwd", "'file' URL refused"),
        ("gopher://127.0.0.1:6379/_INFO", "'gopher' URL refused"),
    ],
)
def test_a_redirect_to_a_forbidden_address_is_refused(location: str, why: str) -> None:
    pages = {
        "/go": Route(302, (("Location", location),), b"", None),
        "/robots.txt": Route(404, (), b"", None),
    }
    with origin_server(pages) as origin:
        settings = CrawlSettings(
            timeout=5.0,
            allow_networks=("127.0.0.1/32",),
            hosts={"site.test": "127.0.0.1", "inside.test": "192.168.1.1"},
        )
        ((outcome, reason),) = asyncio.run(
            _fetch_all(settings, [f"http://site.test:{origin.port}/go"])
        )
        assert outcome == "refused"
        assert why in reason
        assert origin.fetched("/go") == 1


def test_forbidden_is_total_over_addresses() -> None:
    import ipaddress

    for text in ("0.0.0.0", "255.255.255.255", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"):
        assert forbidden(ipaddress.ip_address(text)) is not None


def test_public_addresses_are_fetched_on_the_configured_ports_only() -> None:
    guard = Guard((), ports=(80, 443))
    public = ["93.184.216.34"]
    assert guard.check_port("example.com", 80, public) is None
    reason = guard.check_port("example.com", 25, public)
    assert reason is not None and "example.com:25" in reason and "learn.crawl.ports" in reason
    assert Guard(("127.0.0.0/8",), ports=(80,)).check_port("t", 8123, ["127.0.0.1"]) is None
    assert Guard(()).check_port("example.com", 25, public) is None  # no ports: any port
    assert guard.literal("0x5db8d822") == "93.184.216.34"
    assert guard.literal("[::1]") == "::1" and guard.literal("example.com") is None


def test_the_resolver_refuses_an_unlisted_port_of_a_public_name() -> None:
    resolver = GuardedResolver(Guard((), ports=(80,)), hosts={"pub.test": "93.184.216.34"})
    with pytest.raises(AddressRefused, match=r"pub\.test:25"):
        asyncio.run(resolver.resolve("pub.test", 25))
    assert asyncio.run(resolver.resolve("pub.test", 80))[0]["host"] == "93.184.216.34"


# -- every fetch passes the same checks: robots.txt and its redirects too (issue 30, item 8) --

#: Stands in for a public address: loopback, so that no test leaves the machine, but judged
#: public by the guard in the tests that patch :func:`forbidden` with :func:`_public_trap`.
TRAP = "127.0.0.2"


def _public_trap(address: object) -> str | None:
    return None if str(address) == TRAP else forbidden(address)  # type: ignore[arg-type]


def _trap_server() -> contextlib.AbstractContextManager[Origin]:
    """Another service of a "public" host, on 127.0.0.2: a test asserts it sees nothing."""
    return origin_server(
        {"/robots.txt": Route(200, (), b"User-agent: *\nAllow: /\n", None)}, host=TRAP
    )


@pytest.mark.parametrize("spelling", ["{ip}", "0x7f000002", "[::ffff:{ip}]"])
def test_a_robots_redirect_to_an_ip_literal_on_another_port_is_not_fetched(
    monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    """The attack of issue 30, item 8: the site's robots.txt redirects to a public IP literal
    on a port outside ``learn.crawl.ports``; the crawler must not connect to it (it checked
    the port for page fetches and their hops only)."""
    monkeypatch.setattr(guard_module, "forbidden", _public_trap)
    with _trap_server() as trap:
        host = spelling.format(ip=TRAP)
        target = f"http://{host}:{trap.port}/robots.txt"
        pages = {
            "/robots.txt": Route(302, (("Location", target),), b"", None),
            "/a.html": Route(200, (("Content-Type", "text/html"),), b"<p>a</p>", None),
        }
        with origin_server(pages) as origin:
            settings = _settings(allow_networks=("127.0.0.1/32",), ports=(80, 443))
            url = f"http://site.test:{origin.port}/a.html"
            ((outcome, reason),) = asyncio.run(_fetch_all(settings, [url]))
            assert trap.hits == []  # never contacted
            assert outcome == "refused"
            assert f"{TRAP}:{trap.port}" in reason or f"{host}:{trap.port}" in reason, reason
            assert "robots.txt" in reason and "learn.crawl.ports" in reason
            assert origin.fetched("/a.html") == 0  # a site without readable rules is not read
            # With the port listed, the same redirect is followed: the check is the port's.
            allowed = _settings(allow_networks=("127.0.0.1/32",), ports=(80, 443, trap.port))
            ((outcome, reason),) = asyncio.run(_fetch_all(allowed, [url]))
            assert outcome == "page", reason
            assert trap.fetched("/robots.txt") == len(trap.hits) == 1


def test_a_robots_redirect_to_a_private_address_names_the_setting_that_allows_it() -> None:
    pages = {
        "/robots.txt": Route(302, (("Location", "http://127.0.0.9:8080/robots.txt"),), b"", None),
        "/a.html": Route(200, (("Content-Type", "text/html"),), b"<p>a</p>", None),
    }
    with origin_server(pages) as origin:
        settings = _settings(allow_networks=("127.0.0.1/32",))
        ((outcome, reason),) = asyncio.run(
            _fetch_all(settings, [f"http://site.test:{origin.port}/a.html"])
        )
        assert outcome == "refused"
        assert "127.0.0.9 is loopback" in reason and "learn.crawl.allow_networks" in reason


def test_a_page_redirect_to_a_public_literal_on_another_port_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guard_module, "forbidden", _public_trap)
    with _trap_server() as trap:
        pages = {
            "/go": Route(302, (("Location", f"http://{TRAP}:{trap.port}/x"),), b"", None),
            "/robots.txt": Route(404, (), b"", None),
        }
        with origin_server(pages) as origin:
            settings = _settings(allow_networks=("127.0.0.1/32",), ports=(80,))
            ((outcome, reason),) = asyncio.run(
                _fetch_all(settings, [f"http://site.test:{origin.port}/go"])
            )
        assert trap.hits == []
        assert outcome == "refused" and "learn.crawl.ports" in reason, reason
