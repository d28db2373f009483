"""Table-driven canonicalisation cases: every step of DESIGN.md §1 and every evasion family."""

from __future__ import annotations

import pytest

from urlsieve import InvalidURL, canonicalize, parse_url

CASES: list[tuple[str, str]] = [
    # 1. whitespace and control characters
    ("  http://a.com/\tb\n ", "http://a.com/b"),
    ("http://www.google.com/foo\tbar\rbaz\n2", "http://www.google.com/foobarbaz2"),
    ("\x00\x01 http://a.com/", "http://a.com/"),
    ("http://a.com/ \x7f", "http://a.com/%20%7F"),
    ("http://a.com/%0a%0D", "http://a.com/%0A%0D"),
    ("http://a.\tcom/", "http://a.com/"),
    ("http://a\n.com/x\r\n", "http://a.com/x"),
    # 2. schemes
    ("example.com", "http://example.com/"),
    ("HTTPS://EXAMPLE.COM", "https://example.com/"),
    ("ftp://Files.Example.com/pub/", "ftp://files.example.com/pub/"),
    ("ws://chat.example.com/socket", "ws://chat.example.com/socket"),
    ("WsS://chat.example.com:443/s", "wss://chat.example.com/s"),
    ("//cdn.example.com/x.js", "http://cdn.example.com/x.js"),
    ("example.com:8080/p", "http://example.com/p"),
    ("localhost:3000", "http://localhost/"),
    ("http:/evil.com/x", "http://evil.com/x"),
    ("http:evil.com", "http://evil.com/"),
    ("http:\\\\evil.com\\x", "http://evil.com/x"),
    # 3. fragments and the query split
    ("http://evil.com/blah#frag", "http://evil.com/blah"),
    ("http://evil.com/#", "http://evil.com/"),
    ("http://evil.com#frag/../x", "http://evil.com/"),
    ("http://a.com?q", "http://a.com/?q"),
    ("http://a.com/p?a=b#frag?x", "http://a.com/p?a=b"),
    # 4-5. host: nested percent-escapes, dots, case, IDN
    ("http://WWW.GOOgle.com/", "http://www.google.com/"),
    ("http://www.google.com.../", "http://www.google.com/"),
    ("http://...www.google.com/", "http://www.google.com/"),
    ("http://www..google...com/", "http://www.google.com/"),
    ("http://%77%77%77.%65xample.com/", "http://www.example.com/"),
    ("http://%2577ww.example.com/", "http://www.example.com/"),
    ("http://%252577ww.example.com/", "http://www.example.com/"),
    ("http://EXAMPLE.com%2E/", "http://example.com/"),
    ("http://www.ümlaut.de/", "http://www.xn--mlaut-jva.de/"),
    ("http://WWW.ÜMLAUT.DE/", "http://www.xn--mlaut-jva.de/"),
    ("http://www.%C3%BCmlaut.de/", "http://www.xn--mlaut-jva.de/"),
    ("http://www.%25C3%25BCmlaut.de/", "http://www.xn--mlaut-jva.de/"),
    ("http://ｅｘａｍｐｌｅ.com/", "http://example.com/"),
    ("http://example。com/", "http://example.com/"),
    ("http://bücher.example/", "http://xn--bcher-kva.example/"),
    ("http://xn--bcher-kva.example/", "http://xn--bcher-kva.example/"),
    ("http://a_b.example.com/", "http://a_b.example.com/"),
    ("http://-x-.example.com/", "http://-x-.example.com/"),
    # IPv4 spellings
    ("http://3279880203/blah", "http://195.127.0.11/blah"),
    ("http://0x12.0x43.0x44.0x01/", "http://18.67.68.1/"),
    ("http://012.034.01.055/", "http://10.28.1.45/"),
    ("http://0XC37F000B/", "http://195.127.0.11/"),
    (f"http://0{3279880203:o}/", "http://195.127.0.11/"),
    ("http://1.2.3/", "http://1.2.0.3/"),
    ("http://1.2/", "http://1.0.0.2/"),
    ("http://276.2.3/", "http://20.2.0.3/"),
    ("http://192.168.1.1./", "http://192.168.1.1/"),
    ("http://192.168.001.001/", "http://192.168.1.1/"),
    ("http://0x7f.1/", "http://127.0.0.1/"),
    ("http://%31%39%32.168.1.1/", "http://192.168.1.1/"),
    (
        "http://%31%36%38%2e%31%38%38%2e%39%39%2e%32%36/%2E%2E/%2E/%2E%2E/",
        "http://168.188.99.26/",
    ),
    ("http://0x/", "http://0.0.0.0/"),
    ("http://4294967295/", "http://255.255.255.255/"),
    # IPv6 spellings
    ("http://[2001:0DB8:0000::1]/", "http://[2001:db8::1]/"),
    ("http://[2001:db8:0:0:0:0:0:1]/", "http://[2001:db8::1]/"),
    ("http://[::ffff:1.2.3.4]/", "http://1.2.3.4/"),
    ("http://[::FFFF:102:304]:8080/x", "http://1.2.3.4/x"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("http://[2001:DB8::]/", "http://[2001:db8::]/"),
    # userinfo and ports
    ("http://good.com@evil.com/", "http://evil.com/"),
    ("http://evil.com\\@good.com/", "http://evil.com/@good.com/"),
    ("http://a@b@evil.com/", "http://evil.com/"),
    ("http://user:pass@evil.com:8080/", "http://evil.com/"),
    ("http://evil.com:80@good.com/", "http://good.com/"),
    ("http://www.gotaport.com:1234/", "http://www.gotaport.com/"),
    ("http://evil.com:/", "http://evil.com/"),
    # 6. paths: dot segments (also encoded), slashes, empty paths
    ("HTTP://WWW.Example.COM:80/a/./b/../c//d?x=1#frag", "http://www.example.com/a/c/d?x=1"),
    ("http://www.google.com/blah/..", "http://www.google.com/"),
    ("http://a.com/a/b/.", "http://a.com/a/b/"),
    ("http://a.com/a/b/..", "http://a.com/a/"),
    ("http://a.com/../../x", "http://a.com/x"),
    ("http://a.com/%2e%2e/%2E%2e/x", "http://a.com/x"),
    ("http://a.com/a/%252e%252e/x", "http://a.com/x"),
    ("http://a.com/a%2fb", "http://a.com/a/b"),
    ("http://a.com/a%2F%2Fb", "http://a.com/a/b"),
    ("http://a.com//x//", "http://a.com/x/"),
    ("http://a.com", "http://a.com/"),
    ("http://a.com/...", "http://a.com/..."),
    ("http://a.com/.well-known/x", "http://a.com/.well-known/x"),
    ("http://a.com/a\\b\\..\\c", "http://a.com/a/c"),
    ("http://%77%77%77.%65xample.com/%2561%252e/", "http://www.example.com/a./"),
    # 7. re-escaping, nested escapes in the path
    ("http://host.com/%25%32%35", "http://host.com/%25"),
    ("http://host.com/%25%32%35%25%32%35", "http://host.com/%25%25"),
    ("http://host.com/%2525252525252525", "http://host.com/%25"),
    ("http://host.com/asdf%25%32%35asd", "http://host.com/asdf%25asd"),
    ("http://host.com/%%%25%32%35asd%%", "http://host.com/%25%25%25asd%25%25"),
    ("http://a.com/ü", "http://a.com/%C3%BC"),
    ("http://a.com/%c3%bc", "http://a.com/%C3%BC"),
    ("http://a.com/a b", "http://a.com/a%20b"),
    ("http://a.com/%7Euser", "http://a.com/~user"),
    ("http://a.com/a%23b", "http://a.com/a%23b"),
    ("http://a.com/%41%42", "http://a.com/AB"),
    # queries containing ?, /, #, %
    ("http://a.com/p?x=1&y=2", "http://a.com/p?x=1&y=2"),
    ("http://www.google.com/q?r?s", "http://www.google.com/q?r?s"),
    ("http://www.google.com/q?r?", "http://www.google.com/q?r?"),
    ("http://a.com/p?", "http://a.com/p?"),
    ("http://a.com/p?a=/b/../c", "http://a.com/p?a=/b/../c"),
    ("http://a.com/p?q=%2523", "http://a.com/p?q=%23"),
    ("http://a.com/p?q=a%20b", "http://a.com/p?q=a%20b"),
    ("http://a.com/p?q=%41", "http://a.com/p?q=A"),
    ("http://a.com/p?q=100%", "http://a.com/p?q=100%25"),
    ("http://a.com/p?a=1?b=2", "http://a.com/p?a=1?b=2"),
    ("http://a.com/p?x=\\y", "http://a.com/p?x=\\y"),
    ("http://a.com/p?x= y", "http://a.com/p?x=%20y"),
]

INVALID: list[tuple[str, str]] = [
    ("javascript:alert(1)", "unsupported scheme"),
    ("mailto:x@y", "unsupported scheme"),
    ("data:text/html,hi", "unsupported scheme"),
    ("file:///etc/passwd", "unsupported scheme"),
    ("gopher://old.example/", "unsupported scheme"),
    ("javascript:1", "unsupported scheme 'javascript'"),
    ("javascript:/evil.com/", "unsupported scheme 'javascript'"),
    ("JavaScript:0/x", "unsupported scheme 'javascript'"),
    ("tel:123", "unsupported scheme 'tel'"),
    ("about:1", "unsupported scheme 'about'"),
    ("example.com:/x", "unsupported scheme"),
    ("http://", "empty host"),
    ("http:///path", "empty host"),
    ("http://exa mple.com/", "forbidden character ' '"),
    ("", "empty URL"),
    ("   \t", "empty URL"),
    ("/relative/path", "relative reference"),
    ("http://:80/", "empty host"),
    ("http://@/", "empty host"),
    ("http://.../", "empty host"),
    ("http://a.com:99999/", "invalid port"),
    ("http://a.com:8o/", "invalid port"),
    ("http://[::1/", "unterminated IPv6"),
    ("http://[::g]/", "invalid IPv6"),
    ("http://[::1]x/", "after IPv6"),
    ("http://[fe80::1%25eth0]/", "zone"),
    ("http://1.2.3.4.5/", "more than four parts"),
    ("http://1.2.3.09/", "octal"),
    ("http://foo.1/", "not a number"),
    ("http://a%2Fb.com/", "forbidden character '/'"),
    ("http://a%00b.com/", "forbidden character"),
    ("http://%zz.com/", "forbidden character '%'"),
    ("http://good.com%40evil.com/", "forbidden character '@'"),
    ("http://\x01\x80.com/", "IDNA"),
    ("http://\ud800.com/", "not UTF-8"),
    ("http://%C3%28.com/", "not UTF-8"),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_canonical_form(raw: str, expected: str) -> None:
    assert canonicalize(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_canonical_form_is_a_fixpoint(raw: str, expected: str) -> None:
    assert canonicalize(expected) == expected
    a, b = parse_url(raw), parse_url(expected)
    assert (a.scheme, a.host, a.path, a.query, a.is_ip) == (
        b.scheme,
        b.host,
        b.path,
        b.query,
        b.is_ip,
    )


@pytest.mark.parametrize(("raw", "reason"), INVALID)
def test_invalid_urls_raise_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(InvalidURL) as info:
        canonicalize(raw)
    assert reason in info.value.reason
    assert isinstance(info.value, ValueError)


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 80


def test_structured_form_keeps_port_and_userinfo() -> None:
    url = parse_url("https://User:Pw@Example.COM:8443/a/../b?q=1#f")
    assert (url.scheme, url.host, url.port, url.path, url.query) == (
        "https",
        "example.com",
        8443,
        "/b",
        "q=1",
    )
    assert url.userinfo == "User:Pw"
    assert not url.is_ip
    assert url.canonical == "https://example.com/b?q=1"
    assert url.location == "example.com/b?q=1"


@pytest.mark.parametrize(
    ("raw", "host", "is_ip"),
    [
        ("http://3279880203/", "195.127.0.11", True),
        ("http://[::ffff:1.2.3.4]/", "1.2.3.4", True),
        ("http://[2001:db8::1]/", "[2001:db8::1]", False),
        ("http://10.0.0.1/", "10.0.0.1", True),
        ("http://ten.example/", "ten.example", False),
    ],
)
def test_structured_form_flags_ip_hosts(raw: str, host: str, is_ip: bool) -> None:
    url = parse_url(raw)
    assert (url.host, url.is_ip) == (host, is_ip)


def test_no_query_and_empty_query_differ() -> None:
    assert parse_url("http://a.com/p").query is None
    assert parse_url("http://a.com/p?").query == ""
