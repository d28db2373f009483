from __future__ import annotations

import pytest

from urlsieve import CRAWLER, ConfigError
from urlsieve.seen import open_seen, parse_spec


def test_parse_spec_parts() -> None:
    spec = parse_spec("bloom:/var/x.bloom?capacity=1000&error=0.01")
    assert (spec.backend, spec.location, dict(spec.params)) == (
        "bloom",
        "/var/x.bloom",
        {"capacity": "1000", "error": "0.01"},
    )
    server = parse_spec("valkey://localhost:6379/0?kind=exact")
    assert (server.backend, server.location) == ("valkey", "//localhost:6379/0")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nothing", "has no backend"),
        ("nosuch:x", "unknown store backend 'nosuch'"),
        ("memory:?colour=red", "unknown parameter 'colour' for memory"),
        ("memory:?profile=weird", "unknown profile 'weird'"),
        ("memory:?profile=filter&profile=crawler", "given twice"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_seen(spec)


def test_profile_from_spec() -> None:
    with open_seen("memory:?profile=crawler") as store:
        assert store.profile is CRAWLER
        assert store.add("http://a.example/p?b=1&a=2&utm_source=x")
        assert "http://a.example/p?a=2&b=1" in store
