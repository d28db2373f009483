"""Squid helper line protocol: request parsing, reply formatting, block page templates."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import missing
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.protocol import (
    ProtocolError,
    acl_readings,
    format_reply,
    parse_request,
    quote_value,
    render_template,
    validate_template,
)


def test_url_rewrite_line_with_squid_default_extras() -> None:
    line = "http://evil.com/x 10.0.0.7/pc7.lan alice GET myip=10.0.0.1 myport=3128"
    req = parse_request(line)
    assert req.channel is None
    assert req.url == "http://evil.com/x"
    assert (req.client, req.client_name, req.user, req.method) == (
        "10.0.0.7",
        "pc7.lan",
        "alice",
        "GET",
    )
    assert req.extras == {"myip": "10.0.0.1", "myport": "3128"}


def test_channel_id_is_recognised_and_kept() -> None:
    req = parse_request("17 http://evil.com/ 127.0.0.1/- - GET myip=127.0.0.1 myport=3128")
    assert req.channel == "17"
    assert req.url == "http://evil.com/"
    assert req.client_name is None and req.user is None


def test_channels_forced_on_and_off() -> None:
    assert parse_request("3 http://a.com/", channels=True).channel == "3"
    # Without concurrency a lone token is the URL, even when it looks like a number.
    assert parse_request("3279880203", channels=False).url == "3279880203"
    with pytest.raises(ProtocolError, match="channel ID"):
        parse_request("http://a.com/ 1.2.3.4", channels=True)


def test_bare_url_line() -> None:
    req = parse_request("http://a.com/")
    assert (req.channel, req.url, req.client) == (None, "http://a.com/", None)


def test_external_acl_fields_are_url_unescaped_but_not_the_url() -> None:
    # Squid's external ACL line for "%>ru %>a %un %>rm" plus the appended %DATA "-".
    # Squid 5.7 escapes the URL's non-URL bytes (\xff -> %FF) and leaves "%" alone, so
    # unescaping it would turn a path's %23 into a "#" that cuts the path.
    req = parse_request("4 http://a.com/x%20y%23/../ads 127.0.0.1 bob%20smith GET -", escaped=True)
    assert req.channel == "4"
    assert req.url == "http://a.com/x%20y%23/../ads"
    assert req.user == "bob smith"
    assert req.method == "GET"
    assert parse_request(b"http://a/ 1.2.3.4 b%E9b GET", escaped=True).user == "b\udce9b"


def test_connect_authority_becomes_https_url() -> None:
    req = parse_request("evil.com:443 10.0.0.1/- - CONNECT myip=- myport=3128")
    assert req.target == "https://evil.com:443/"
    assert parse_request("[2001:db8::1]:443").target == "https://[2001:db8::1]:443/"
    assert parse_request("http://a.com/").target == "http://a.com/"


@pytest.mark.parametrize("line", ["", "   ", "7"])
def test_lines_without_a_url(line: str) -> None:
    with pytest.raises(ProtocolError):
        parse_request(line)


def test_a_lone_number_is_a_channel_without_url_unless_channels_are_off() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request("7")  # auto: a Squid URL is never a bare number
    assert info.value.channel == "7"
    assert parse_request("7", channels=False).url == "7"


@pytest.mark.parametrize("space", ["\u3000", "\u2000", "\u200a", "\u2028", "\u00a0", "\x85"])
def test_only_ascii_space_separates_fields(space: str) -> None:
    req = parse_request(f"http://bad.org/x{space}/../ads 10.0.0.1/- bob GET".encode())
    assert req.url == f"http://bad.org/x{space}/../ads"
    assert (req.client, req.user, req.method) == ("10.0.0.1", "bob", "GET")


def test_bytes_that_are_not_utf8_are_kept() -> None:
    req = parse_request(b"3 http://evil.com/\xff\xe9 10.0.0.1 \xe9ric GET")
    assert req.channel == "3"
    assert req.url.encode("utf-8", "surrogateescape") == b"http://evil.com/\xff\xe9"
    assert req.user is not None and req.user.encode("utf-8", "surrogateescape") == b"\xe9ric"


def test_reply_values_are_printable_ascii_whatever_they_hold() -> None:
    value = 'a\x00b\udcff\ud800é\r\n\t\x7f"'
    quoted = quote_value(value)
    assert quoted == '"a%00b%FF%ED%A0%80%C3%A9\\r\\n\\t%7F\\""'
    assert quoted.isascii() and quoted.isprintable()


def test_template_encodes_any_byte() -> None:
    out = render_template(
        "http://b/?u=%u&i=%i&n=%n",
        url="http://evil.com/\udcff",
        category=None,
        client="10.0.0.1",
        client_name="pc\ud800",
        user="\udce9ric",
    )
    assert out == "http://b/?u=http%3A%2F%2Fevil.com%2F%FF&i=%E9ric&n=pc%ED%A0%80"


def test_channel_without_url_keeps_the_channel_for_bh() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request("5 -")
    assert info.value.channel == "5"


def test_reply_formats() -> None:
    assert format_reply(None, "ERR") == "ERR\n"
    assert format_reply("3", "ERR") == "3 ERR\n"
    assert (
        format_reply("0", "OK", status=302, url="http://b/?u=x")
        == '0 OK status=302 url="http://b/?u=x"\n'
    )
    assert format_reply(None, "OK", rewrite_url="http://b/") == 'OK rewrite-url="http://b/"\n'
    assert format_reply(None, "BH", message='bad "line"\n') == 'BH message="bad \\"line\\"\\n"\n'
    assert format_reply(None, "OK", tag="adult", message=None) == 'OK tag="adult"\n'


def test_quote_value_escapes_backslash_first() -> None:
    assert quote_value('a\\"b') == '"a\\\\\\"b"'


def test_template_substitutions_are_percent_encoded() -> None:
    out = render_template(
        "http://block.lan/?url=%u&cat=%c&t=%t&client=%a&name=%n&user=%i&rule=%r&pct=%%",
        url="http://evil.com/a b?x=1&y=2",
        category="adult sites",
        client="10.0.0.7",
        client_name=None,
        user=None,
        rule="lists/adult/domains:12",
    )
    assert out == (
        "http://block.lan/?url=http%3A%2F%2Fevil.com%2Fa%20b%3Fx%3D1%26y%3D2"
        "&cat=adult%20sites&t=adult%20sites&client=10.0.0.7&name=10.0.0.7&user=-"
        "&rule=lists%2Fadult%2Fdomains%3A12&pct=%"
    )


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("http://b/?x=%q", "unknown substitution %q"),
        ("http://b/?x=%", "lone %"),
        ("block.lan/?u=%u", "not absolute"),
    ],
)
def test_bad_templates_are_refused_with_the_fix(template: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_template(template)


def test_good_template_passes() -> None:
    assert validate_template("https://b.lan/%%?u=%u") == "https://b.lan/%%?u=%u"


def test_acl_readings_cover_a_raw_hash_and_backslash() -> None:
    # Squid sends the external ACL "#" as %23 and "\\" as %5C, and a client's own %23 and
    # %5C as they are: every reading is checked, and the most restrictive one wins.
    assert acl_readings("http://a/x") == ["http://a/x"]
    assert acl_readings("http://a/ads/x%23/../../y%5Cz") == [
        "http://a/ads/x%23/../../y%5Cz",
        "http://a/ads/x%23/../../y\\z",
        "http://a/ads/x",
    ]
    with pytest.raises(ProtocolError, match="more than 8 %23"):
        acl_readings("http://a/" + "%23" * 9)


def _render_reference(template: str, **values: str | None) -> str:
    """The block page as first written: a regular expression and ``quote_from_bytes``."""
    import re
    from urllib.parse import quote_from_bytes

    from urlsieve.url.path import to_bytes

    table = {
        "a": values["client"] or "-",
        "n": values["client_name"] or values["client"] or "-",
        "i": values["user"] or "-",
        "u": values["url"],
        "c": values["category"] or "-",
        "t": values["category"] or "-",
        "r": values["rule"] or "-",
    }

    def sub(match: re.Match[str]) -> str:
        code = match.group(1)
        return "%" if code == "%" else quote_from_bytes(to_bytes(table[code or ""]), safe="")

    return re.sub(r"%(.)", sub, template, flags=re.DOTALL)


@settings(max_examples=300, deadline=None)
@given(
    template=st.lists(
        st.sampled_from(["%u", "%c", "%t", "%a", "%n", "%i", "%r", "%%", "x", "?q=", "/"]),
        max_size=8,
    ).map(lambda parts: "http://block.lan/" + "".join(parts)),
    url=st.text(),
    fields=st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=5, max_size=5),
)
def test_the_parsed_template_renders_as_the_reference(
    template: str, url: str, fields: list[str | None]
) -> None:
    category, client, client_name, user, rule = fields
    values = {
        "url": url,
        "category": category,
        "client": client,
        "client_name": client_name,
        "user": user,
        "rule": rule,
    }
    assert render_template(template, **values) == _render_reference(template, **values)


_scan = getattr(__import__("urlsieve._accel", fromlist=["speedups"]).speedups, "squid_scan", None)
_line_bytes = st.one_of(
    st.binary(max_size=80),
    st.lists(
        st.sampled_from(
            [
                b"0",
                b"12",
                b"007",
                b"http://a.example/x",
                b"a.example:443",
                b"-",
                b"CONNECT",
                b"GET",
                b"10.0.0.1/-",
                b"user",
                b"k=v",
                b"%41",
                b"\xff",
                b"[::1]:443",
                b"",
                b"\t",
            ]
        ),
        max_size=6,
    ).map(b" ".join),
)


@settings(max_examples=1500, deadline=None)
@given(
    lines=st.lists(_line_bytes, max_size=8),
    channels=st.sampled_from([None, True, False]),
    escaped=st.booleans(),
)
def test_the_compiled_line_scan_agrees_with_parse_request(
    lines: list[bytes], channels: bool | None, escaped: bool
) -> None:
    if _scan is None:
        missing("urlsieve._speedups was not built (no C compiler?): no line scan to compare")
    import numpy as np

    from urlsieve.gateway.protocol import parse_request

    out = np.empty(len(lines), dtype=np.int64)
    mode = 0 if channels is False else 1 if channels else 2
    urls = _scan(lines, mode, escaped, out)  # type: ignore[misc]
    for line, url, channel in zip(lines, urls, out.tolist(), strict=True):
        if url is None:
            continue  # the helper parses this line with parse_request itself
        request = parse_request(line, channels=channels, escaped=escaped)
        assert request.target == url, line
        assert request.channel == (None if channel < 0 else str(channel)), line
        assert not (escaped and "%" in url)


def test_the_compiled_line_scan_refuses_misuse() -> None:
    if _scan is None:
        missing("urlsieve._speedups was not built (no C compiler?): no line scan to test")
    import numpy as np

    out = np.empty(1, dtype=np.int64)
    with pytest.raises(TypeError):
        _scan([b"x"], 2, False)  # type: ignore[misc]
    with pytest.raises(TypeError):
        _scan(["http://a.example/"], 2, False, out)  # type: ignore[misc]
    with pytest.raises(TypeError):
        _scan((b"x",), 2, False, out)  # type: ignore[misc]
    with pytest.raises(ValueError):
        _scan([b"x", b"y"], 2, False, out)  # type: ignore[misc]
    with pytest.raises(ValueError):
        _scan([b"x"], 3, False, out)  # type: ignore[misc]
    assert _scan([b"3 http://a.example/ 10.0.0.1"], 2, False, out) == ["http://a.example/"]  # type: ignore[misc]
    assert out[0] == 3


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_the_compiled_quote_equals_the_reference(text: str) -> None:
    from urllib.parse import quote_from_bytes

    from urlsieve.gateway.protocol import _quote_all, _quote_all_py
    from urlsieve.url.path import to_bytes

    assert _quote_all(text) == _quote_all_py(text) == quote_from_bytes(to_bytes(text), safe="")
