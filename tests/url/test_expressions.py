from __future__ import annotations

import pytest

from urlsieve import lookup_expressions
from urlsieve.url import host_suffixes, is_public_suffix, path_prefixes


def test_host_times_path_most_specific_first() -> None:
    assert lookup_expressions("http://a.b.example.co.uk/1/2.html?x=y") == [
        "a.b.example.co.uk/1/2.html?x=y",
        "a.b.example.co.uk/1/2.html",
        "a.b.example.co.uk/1/",
        "a.b.example.co.uk/",
        "b.example.co.uk/1/2.html?x=y",
        "b.example.co.uk/1/2.html",
        "b.example.co.uk/1/",
        "b.example.co.uk/",
        "example.co.uk/1/2.html?x=y",
        "example.co.uk/1/2.html",
        "example.co.uk/1/",
        "example.co.uk/",
    ]


def test_expressions_are_computed_on_the_canonical_form() -> None:
    assert lookup_expressions("HTTP://User@WWW.Example.COM:81/a/./b/../#f") == [
        "www.example.com/a/",
        "www.example.com/",
        "example.com/a/",
        "example.com/",
    ]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("example.com", ("example.com",)),
        ("www.example.com", ("www.example.com", "example.com")),
        ("co.uk", ("co.uk",)),
        ("com", ("com",)),
        ("x.y.internal", ("x.y.internal", "y.internal")),
        # ICANN section only: a private suffix stays a blockable domain.
        ("user.github.io", ("user.github.io", "github.io")),
    ],
)
def test_host_suffixes_never_a_bare_public_suffix(host: str, expected: tuple[str, ...]) -> None:
    assert host_suffixes(host) == expected


def test_ip_hosts_have_only_themselves() -> None:
    assert lookup_expressions("http://0x0a.1/x") == ["10.0.0.1/x", "10.0.0.1/"]
    assert lookup_expressions("http://[2001:db8::1]/") == ["[2001:db8::1]/"]
    assert host_suffixes("1.2.3.4", is_ip=True) == ("1.2.3.4",)


@pytest.mark.parametrize(
    ("path", "query", "expected"),
    [
        ("/", None, ["/"]),
        ("/", "", ["/?", "/"]),
        ("/a", None, ["/a", "/"]),
        ("/a/", None, ["/a/", "/"]),
        ("/a/b/c.html", "p=1", ["/a/b/c.html?p=1", "/a/b/c.html", "/a/b/", "/a/", "/"]),
    ],
)
def test_path_prefixes_at_segment_boundaries(
    path: str, query: str | None, expected: list[str]
) -> None:
    assert path_prefixes(path, query) == expected


def test_public_suffix_check() -> None:
    assert is_public_suffix("co.uk")
    assert not is_public_suffix("example.co.uk")
