"""The Squid helper under hostile bytes, in redirect, rewrite and ACL modes, channels on,
off and auto: every line gets exactly one well-formed reply, no exception escapes, and
no spelling of a blocked URL is allowed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import FUZZ
from tests.fuzz.corpus import SEEDS, seed_ids
from tests.fuzz.drivers import (
    HELPER_CASES,
    HelperCase,
    ask,
    reply_result,
    request_channel,
    serve_stream,
    stream,
)
from tests.fuzz.policy import NOT_BLOCKED
from tests.fuzz.strategies import blocked_spellings, hostile_lines, squid_escape
from urlsieve.gateway import HelperMode

CASE_IDS = [case.id for case in HELPER_CASES]
RESULTS = (b"OK", b"ERR", b"BH")
FIELDS = b" 10.0.0.7/pc7.lan - GET myip=10.0.0.1 myport=3128"

#: Seed lines (without a channel ID) every helper must block: the issue's bypasses, and
#: URLs it cannot read (fail-closed).
BLOCKED_LINES = (
    b"http://bad.org/\xff",
    b"http://bad.org/\xff" + FIELDS,
    b"http://latin.example/caf\xe9/menu",
    b"http://bad.org/ 10.0.0.7/pc7.lan j\xe9r\xf4me GET",
    b"http://bad.org/ 10.0.0.7/p\xe9c.lan \xff GET",
    b"http://bad.org/ \xff/\xfe \xfd \xfc k\xff=v\xfe",
    *(line for cls, line in SEEDS if cls in ("pct-23-3f", "unicode-space", "dot-slash")),
    *(
        line
        for cls, line in SEEDS
        if cls in ("latin1-path", "many-labels", "pct-25-chain") and b"good.org" not in line
    ),
    b"http://bad.org:" + b"9" * 5000 + b"/",
    b"http://ads.example/a\rb/../../ads",
    b"http://ads.example/a\t/../ads",
    b"http://bad.org\x00.good.org/",
    b"http://ads.example/ads/" + b"a" * 200_000,
    b"http://bad.org/ 10.0.0.7/" + b"n" * 70_000,
    b"http://bad.org/ - - - - - - - - - - - - -",
    b"http://bad.org/ a=b c=d =e f= %=%",
    b"bad.org:443 10.0.0.7/- - CONNECT",
    b"[::ffff:10.9.8.7]:443 10.0.0.7/- - CONNECT",
    b"javascript:alert(1)",
    b"http://good.org@bad.org/",
    b"http://bad.org\\@good.org/",
)


def check_reply(case: HelperCase, line: bytes, reply: bytes) -> bytes:
    """The invariants of every reply; returns its result (OK, ERR, BH)."""
    context = f"{case.id}: line {line[:120]!r} got reply {reply[:200]!r}"
    assert reply.endswith(b"\n") and reply.count(b"\n") == 1, f"not one reply line: {context}"
    channel = request_channel(line) if case.channels is not False else None
    if channel is not None:
        assert reply.startswith(channel + b" "), f"channel ID not echoed: {context}"
    result = reply_result(reply, channel)
    assert result in RESULTS, f"no OK/ERR/BH result: {context}"
    if channel is not None and not line[len(channel) :].strip(b" "):
        assert result == b"BH", f"a lone channel ID is not a request: {context}"
    return result


def on_channel(case: HelperCase, line: bytes, channel: bytes = b"5") -> list[bytes]:
    """``line`` as Squid sends it to this helper: with a channel ID when channels are on;
    both with and without one when they are recognised (auto)."""
    if case.channels is True:
        return [channel + b" " + line]
    if case.channels is None:
        return [channel + b" " + line, line]
    return [line]


def blocked(case: HelperCase, result: bytes) -> bool:
    return result == b"OK"


# -- the seed corpus, every line through every mode --------------------------------------


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
@pytest.mark.parametrize("line", [line for _, line in SEEDS], ids=seed_ids())
def test_every_seed_gets_one_reply(case: HelperCase, line: bytes) -> None:
    helper = case.helper()
    for request in {line, *on_channel(case, line)}:
        check_reply(case, request, ask(helper, request))


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
@pytest.mark.parametrize("line", BLOCKED_LINES, ids=[repr(x[:50]) for x in BLOCKED_LINES])
def test_seed_bypasses_are_blocked(case: HelperCase, line: bytes) -> None:
    helper = case.helper()
    requests = on_channel(case, line)
    if case.mode is HelperMode.ACL:  # also as Squid escapes an external ACL's fields
        url, sep, fields = line.partition(b" ")
        requests += on_channel(case, squid_escape(url) + sep + fields)
    for request in requests:
        reply = ask(helper, request)
        result = check_reply(case, request, reply)
        assert blocked(case, result), f"{case.id}: {request[:120]!r} allowed: {reply[:200]!r}"


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
@pytest.mark.parametrize("url", NOT_BLOCKED, ids=[u.decode() for u in NOT_BLOCKED])
def test_allowed_urls_are_not_blocked(case: HelperCase, url: bytes) -> None:
    helper = case.helper()
    for request in on_channel(case, url + FIELDS):
        reply = ask(helper, request)
        assert check_reply(case, request, reply) == b"ERR", f"{case.id}: {reply[:200]!r}"


# -- generated lines ---------------------------------------------------------------------


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
@FUZZ
@given(line=hostile_lines)
def test_any_line_gets_one_reply(case: HelperCase, line: bytes) -> None:
    check_reply(case, line, ask(case.helper(), line))


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
@FUZZ
@given(urls=st.lists(blocked_spellings(), min_size=1, max_size=8), fields=st.booleans())
def test_no_spelling_of_a_blocked_url_is_allowed(
    case: HelperCase, urls: list[bytes], fields: bool
) -> None:
    helper = case.helper()
    for url in urls:
        requests = on_channel(case, url + (FIELDS if fields else b""))
        if case.mode is HelperMode.ACL:
            requests += on_channel(case, squid_escape(url) + (FIELDS if fields else b""))
        for request in requests:
            reply = ask(helper, request)
            result = check_reply(case, request, reply)
            assert blocked(case, result), f"{case.id}: {request!r} allowed: {reply[:200]!r}"


@FUZZ
@given(line=hostile_lines)
def test_acl_and_redirect_modes_agree(line: bytes) -> None:
    """The URL Squid sends raw to url_rewrite and escaped to an external ACL: the ACL is never
    looser than the redirector.

    On well-formed URLs the two agree exactly (the seed bypasses above, and
    tests/gateway/test_helper.py). On junk that Squid itself refuses with a 400 before any
    helper sees it (control bytes, quotes or braces in the authority) the escaped form
    can fail to canonicalise where the raw one does: the ACL then fails closed. Stricter,
    never looser, is the property that matters at a gateway.
    """
    url = line.replace(b" ", b"")
    redirect = HelperCase(HelperMode.REDIRECT, channels=False).helper()
    acl = HelperCase(HelperMode.ACL, channels=False).helper()
    by_redirect = reply_result(ask(redirect, url), None)
    by_acl = reply_result(ask(acl, squid_escape(url)), None)
    assert not (by_redirect == b"OK" and by_acl != b"OK"), (
        f"{url!r}: redirect mode {by_redirect!r}, the ACL is looser: {by_acl!r}"
    )


# -- the stdin/stdout loop ---------------------------------------------------------------


@FUZZ
@given(
    case=st.sampled_from(HELPER_CASES),
    lines=st.lists(hostile_lines, min_size=1, max_size=30),
    chunk=st.integers(1, 8192),
)
def test_serve_answers_every_line_in_order(
    case: HelperCase, lines: list[bytes], chunk: int
) -> None:
    replies = serve_stream(case.helper(), stream(lines), chunk).split(b"\n")
    assert replies.pop() == b"", "the last reply does not end with a newline"
    assert len(replies) == len(lines), f"{case.id}: {len(lines)} lines, {len(replies)} replies"
    for line, reply in zip(lines, replies, strict=True):
        check_reply(case, line.rstrip(b"\r"), reply + b"\n")


@pytest.mark.parametrize("case", HELPER_CASES, ids=CASE_IDS)
def test_serve_answers_the_whole_corpus_and_an_over_long_line(case: HelperCase) -> None:
    lines = [line for _, line in SEEDS]
    lines += [b"http://good.org/" + b"a" * (1 << 21), *on_channel(case, b"http://bad.org/")[:1]]
    replies = serve_stream(case.helper(), stream(lines), 1 << 16).split(b"\n")
    assert replies.pop() == b""
    assert len(replies) == len(lines)
    for line, reply in zip(lines, replies, strict=True):
        check_reply(case, line.rstrip(b"\r"), reply + b"\n")
    assert reply_result(replies[-1] + b"\n", request_channel(lines[-1])) == b"OK"
