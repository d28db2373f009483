"""What the lookup service believes, through a real ``urlsieve serve`` on loopback and
through the application under plain uvicorn (issue 29):

- no header decides who asks unless configured: ``X-Forwarded-For``, ``Forwarded`` and
  ``X-Real-IP`` from an untrusted peer change nothing, a trusted proxy's last address
  is used, and a peer address a server took from such a header is refused;
- a request is framed one way only: both ``Content-Length`` and ``Transfer-Encoding``,
  two lengths or two hosts get a 400 and a closed connection before any handler, and
  a request smuggled behind one never runs;
- a warning's continue is granted only through the service's own confirmation page:
  an ``<img>``, an ``<iframe>``, a link or a form on another site grants nothing, the
  click from the warning page (served by another host) grants and lands on the URL.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

import pytest
from starlette.testclient import TestClient

from tests.gateway.servers import free_port
from tests.gateway.test_service import running
from urlsieve.gateway.config import load_config
from urlsieve.gateway.headers import framing_problem, last_named, named_addresses
from urlsieve.policy.engine import Who
from urlsieve.service.app import confirmation, continue_key, create_app

PUPILS_ON_LOOPBACK = '["127.0.0.0/8", "::1"]'
PUPILS_BEHIND_A_PROXY = '["10.0.1.0/24"]'
STAFF = "10.9.9.9"
TOKEN = "t" * 32

POLICY = """
[policy]
warn_store = "sqlite:{grants}"
warn_minutes = 30
warn_page = "http://warn.test/?u=%u&t=%t"

[[dest]]
name = "games"
domainlist = "games"

[[dest]]
name = "social"
domainlist = "social"

[[source]]
name = "staff"
ip = ["{staff}"]

[[source]]
name = "pupils"
ip = {pupils}

[[acl]]
source = "staff"
pass = ["all"]

[[acl]]
source = "pupils"
pass = ["!games", "?social", "all"]
redirect = "http://block.test/?t=%t"

[[acl]]
source = "default"
pass = ["!games", "all"]
redirect = "http://block.test/?t=%t"

[service]
bind = "127.0.0.1:{port}"
seen_store = "memory:"
{service}
"""


def write_config(directory: Path, port: int, pupils: str, service: str = "") -> Path:
    """A policy where one URL gets two answers: ``games.example`` is blocked for pupils and
    everyone else, allowed for staff (10.9.9.9); ``social.example`` and ``chat.example``
    warn pupils."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "games").write_text("games.example\n")
    (directory / "social").write_text("social.example\nchat.example\n")
    path = directory / "urlsieve.toml"
    path.write_text(
        POLICY.format(
            grants=directory / "grants.db", staff=STAFF, pupils=pupils, port=port, service=service
        )
    )
    return path


@pytest.fixture(scope="module")
def serve_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``start(name, pupils, service, server=..., **run)``: the port of ``urlsieve serve``
    (or, with ``server="uvicorn"``, of the application under ``uvicorn.run(app, **run)``)
    on a config; one process per name, kept until the module ends."""
    ports: dict[str, int] = {}
    contexts: list[Any] = []

    def start(
        name: str, pupils: str, service: str = "", *, server: str = "serve", **run: Any
    ) -> int:
        if name in ports:
            return ports[name]
        port = free_port()
        config = write_config(tmp_path_factory.mktemp("service"), port, pupils, service)
        if server == "serve":
            argv = [sys.executable, "-m", "urlsieve", "serve", "--config", str(config)]
        else:
            argv = [sys.executable, "-c", UNDER_UVICORN, str(config), str(port), json.dumps(run)]
        context = running(argv, port)
        context.__enter__()
        contexts.append(context)
        ports[name] = port
        return port

    yield start
    for context in reversed(contexts):
        context.__exit__(None, None, None)


#: The application under uvicorn as a user would run it: ``uvicorn.run(app)``, proxy
#: headers on (uvicorn's default, trusting 127.0.0.1) unless the test says otherwise.
UNDER_UVICORN = """
import json, sys, uvicorn
from urlsieve.gateway.config import load_config
from urlsieve.service.app import create_app
app = create_app(load_config(sys.argv[1], env={}))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning",
            **json.loads(sys.argv[3]))
"""


def call(
    port: int,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request; ``headers`` in order, a name may repeat. Redirects are not followed."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def check(port: int, url: str, headers: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    status, _, body = call(port, "GET", "/v1/check?url=" + quote(url, safe=""), headers)
    data: dict[str, Any] = json.loads(body)
    data["status"] = status
    return data


def source(port: int, headers: Sequence[tuple[str, str]]) -> str:
    """The policy source ``games.example`` is decided for, with these headers."""
    data = check(port, "http://games.example/", headers)
    assert data["status"] == 200, data
    name: str = data["policy"]["source"]
    assert data["action"] == ("allow" if name == "staff" else "block")
    return name


# -- identity ---------------------------------------------------------------------------

CLAIMS = [
    [("X-Forwarded-For", STAFF)],
    [("X-Forwarded-For", f"{STAFF}:4711")],
    [("X-Forwarded-For", "203.0.113.1"), ("X-Forwarded-For", STAFF)],
    [("Forwarded", f"for={STAFF}")],
    [("Forwarded", f'for="{STAFF}:80";proto=http')],
    [("X-Real-IP", STAFF)],
    [("X-Forwarded-For", STAFF), ("Forwarded", f"for={STAFF}"), ("X-Real-IP", STAFF)],
]


@pytest.mark.parametrize(
    "service",
    [
        "trusted_proxies = []",
        'trusted_proxies = []\nclient_header = "X-Forwarded-For"',
        "",  # unset: loopback may name the client in fields, but no header is read
    ],
    ids=["no-trusted-proxy", "no-trusted-proxy-with-client-header", "default-without-header"],
)
def test_an_untrusted_peer_cannot_name_itself_with_a_forwarding_header(
    serve_factory: Any, service: str
) -> None:
    port = serve_factory(f"untrusted: {service}", PUPILS_ON_LOOPBACK, service)
    assert source(port, []) == "pupils"
    for claim in CLAIMS:
        assert source(port, claim) == "pupils", claim


@pytest.mark.parametrize(
    ("header", "appended"),
    [
        ("X-Forwarded-For", lambda address: address),
        ("Forwarded", lambda address: f"for={address};proto=http"),
        ("X-Real-IP", lambda address: address),
    ],
    ids=["X-Forwarded-For", "Forwarded", "X-Real-IP"],
)
def test_a_trusted_proxy_names_the_client_by_the_last_address_it_appends(
    serve_factory: Any, header: str, appended: Any
) -> None:
    service = f'trusted_proxies = ["127.0.0.1"]\nclient_header = "{header}"'
    port = serve_factory(f"trusted: {header}", PUPILS_BEHIND_A_PROXY, service)
    assert source(port, [(header, appended(STAFF))]) == "staff"
    assert source(port, [(header, appended("10.0.1.5"))]) == "pupils"
    # The client's own claim first, then the address the proxy appended: the last wins,
    # whether the proxy appends to the line or adds a line.
    claim = appended(STAFF)
    assert source(port, [(header, f"{claim}, {appended('10.0.1.5')}")]) == "pupils"
    assert source(port, [(header, claim), (header, appended("10.0.1.5"))]) == "pupils"
    # Other forwarding headers are not the configured one: ignored.
    others = [(h, STAFF) for h in ("X-Forwarded-For", "X-Real-IP") if h != header]
    assert source(port, [*others, (header, appended("10.0.1.5"))]) == "pupils"
    # Without the header the client is the proxy itself (in no source: the default ACL).
    assert source(port, []) == "default"


def test_the_app_under_uvicorn_defaults_never_takes_a_forwarded_peer(serve_factory: Any) -> None:
    """uvicorn's proxy headers (on by default, trusting 127.0.0.1) put the address
    X-Forwarded-For names into the peer address: the application refuses it (403), it
    never decides for the claimed client."""
    port = serve_factory(
        "uvicorn: untrusted", PUPILS_ON_LOOPBACK, "trusted_proxies = []", server="uvicorn"
    )
    assert source(port, []) == "pupils"
    for claim in CLAIMS:
        data = check(port, "http://games.example/", claim)
        if any(name == "X-Forwarded-For" for name, _ in claim):
            assert (data["status"], data["error"]) == (403, "forwarded_peer"), claim
            assert "--no-proxy-headers" in data["detail"]
        else:  # uvicorn reads no other header: ignored, as under urlsieve serve
            assert data["policy"]["source"] == "pupils", claim


def test_the_app_under_uvicorn_without_proxy_headers_believes_only_its_proxy(
    serve_factory: Any,
) -> None:
    """Run as the README says (proxy_headers=False), the application trusts its configured
    proxy's last address; with uvicorn's defaults it refuses that proxy's requests."""
    service = 'trusted_proxies = ["127.0.0.1"]\nclient_header = "X-Forwarded-For"'
    port = serve_factory(
        "uvicorn: trusted", PUPILS_BEHIND_A_PROXY, service, server="uvicorn", proxy_headers=False
    )
    assert source(port, [("X-Forwarded-For", f"{STAFF}, 10.0.1.5")]) == "pupils"
    assert source(port, [("X-Forwarded-For", STAFF)]) == "staff"
    misrun = serve_factory(
        "uvicorn: trusted, misrun", PUPILS_BEHIND_A_PROXY, service, server="uvicorn"
    )
    data = check(misrun, "http://games.example/", [("X-Forwarded-For", f"{STAFF}, 10.0.1.5")])
    assert (data["status"], data["error"]) == (403, "forwarded_peer")


def test_a_peer_a_forwarding_header_names_is_refused_in_process(tmp_path: Path) -> None:
    config = write_config(tmp_path, free_port(), PUPILS_ON_LOOPBACK, "trusted_proxies = []")
    app = create_app(load_config(str(config), env={}))
    with TestClient(app, client=(STAFF, 0)) as rewritten:
        for name, value in (
            ("X-Forwarded-For", f"[{STAFF}]:1"),
            ("Forwarded", f'For="{STAFF}"'),
            ("X-Real-IP", STAFF),
        ):
            r = rewritten.get(
                "/v1/check", params={"url": "http://games.example/"}, headers={name: value}
            )
            assert (r.status_code, r.json()["error"]) == (403, "forwarded_peer"), name
        r = rewritten.get("/v1/check", params={"url": "http://games.example/"})
        assert r.json()["policy"]["source"] == "staff"  # no header: the peer as given


def test_forwarding_header_addresses() -> None:
    assert last_named("X-Forwarded-For", ["1.1.1.1, 2.2.2.2", " 3.3.3.3:80 "]) == "3.3.3.3"
    assert last_named("x-real-ip", ["[2001:db8::1]:4711"]) == "2001:db8::1"
    assert last_named("X-Forwarded-For", ["2001:db8::1"]) == "2001:db8::1"
    assert last_named("Forwarded", ['for=1.1.1.1, For="[2001:db8::2]";proto=https']) == (
        "2001:db8::2"
    )
    # The element the proxy appended names nobody: an earlier one is never used instead.
    assert last_named("Forwarded", ["for=1.1.1.1, proto=https"]) is None
    assert last_named("X-Forwarded-For", ["1.1.1.1, "]) is None
    assert last_named("X-Forwarded-For", []) is None
    assert named_addresses("Forwarded", ["for=a;by=b, for=c", "proto=x"]) == ["a", "c"]
    hostile = "\x00\udcff[[[:::" * 2000 + '"' * 3000
    for header in ("forwarded", "x-forwarded-for"):
        named_addresses(header, [hostile, hostile])
        last_named(header, [hostile])


# -- framing ----------------------------------------------------------------------------

TEST_BODY = b'{"op": "test", "urls": []}'
CHUNKED_TEST = b"%x\r\n%s\r\n0\r\n\r\n" % (len(TEST_BODY), TEST_BODY)
HEAD = b"POST /v1/seen HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

TWO_WAYS = {
    "length-then-chunked": HEAD
    + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(CHUNKED_TEST)
    + CHUNKED_TEST,
    "chunked-then-length": HEAD
    + b"Transfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(CHUNKED_TEST)
    + CHUNKED_TEST,
    "chunked-then-short-length": HEAD
    + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"
    + CHUNKED_TEST,
    "two-lengths": HEAD
    + b"Content-Length: %d\r\nContent-Length: 0\r\n\r\n" % len(TEST_BODY)
    + TEST_BODY,
    "two-equal-length-lines": HEAD
    + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(TEST_BODY), len(TEST_BODY))
    + TEST_BODY,
    "a-length-list": HEAD
    + b"Content-Length: %d, %d\r\n\r\n" % (len(TEST_BODY), len(TEST_BODY))
    + TEST_BODY,
    "two-hosts": HEAD + b"Host: y\r\nContent-Length: %d\r\n\r\n" % len(TEST_BODY) + TEST_BODY,
    "chunked-in-http-1.0": HEAD.replace(b"HTTP/1.1", b"HTTP/1.0")
    + b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
    + CHUNKED_TEST,
}


def smuggled(url: str) -> bytes:
    """A request adding ``url`` to the seen store, closing the connection after it."""
    body = json.dumps({"op": "add", "urls": [url]}).encode()
    return (
        HEAD.replace(b"Host: x", b"Host: x\r\nConnection: close")
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def exchange(port: int, data: bytes, timeout: float = 15.0) -> bytes:
    """Send ``data`` on one connection; everything received until the server closes it."""
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                return bytes(received)
            received += chunk
    raise AssertionError(f"the connection stayed open; received {bytes(received)!r}")


def statuses(received: bytes) -> list[int]:
    """The status of each response received (JSON bodies never hold a status line)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", received)]


def seen(port: int, url: str) -> bool:
    body = json.dumps({"op": "test", "urls": [url]}).encode()
    status, _, answer = call(port, "POST", "/v1/seen", [("Content-Type", "application/json")], body)
    assert status == 200, answer
    flag: bool = json.loads(answer)["seen"][0]
    return flag


@pytest.mark.parametrize("server", ["serve", "uvicorn"])
@pytest.mark.parametrize("case", list(TWO_WAYS))
def test_a_request_framed_two_ways_is_refused_and_what_it_hides_never_runs(
    serve_factory: Any, server: str, case: str
) -> None:
    port = serve_factory(f"framing: {server}", PUPILS_ON_LOOPBACK, server=server)
    # The control: framed one way, the request behind it on the connection runs.
    one_way = HEAD + b"Content-Length: %d\r\n\r\n" % len(TEST_BODY) + TEST_BODY
    behind = f"http://{case}.control.example/"
    assert statuses(exchange(port, one_way + smuggled(behind))) == [200, 200]
    assert seen(port, behind)
    hidden = f"http://{case}.smuggled.example/"
    received = exchange(port, TWO_WAYS[case] + smuggled(hidden))
    if server == "uvicorn" and case in ("two-equal-length-lines", "a-length-list"):
        # Under another server the application sees the headers h11 passes on, with
        # equal lengths folded into one: one reading only, nothing hides.
        assert statuses(received) == [200, 200]
        return
    assert statuses(received) == [400], received
    assert b"connection: close" in received.lower()
    if server == "serve" or case not in ("two-lengths", "two-hosts"):  # not uvicorn's text
        code = b"bad_request" if case in ("two-lengths", "two-hosts") else b"ambiguous_framing"
        assert code in received  # h11's own refusals, and the framing check's
    assert not seen(port, hidden)


def test_framing_problem() -> None:
    assert framing_problem("1.1", [(b"Content-Length", b"3")]) is None
    assert framing_problem("1.1", [(b"Transfer-Encoding", b"chunked")]) is None
    assert framing_problem("1.1", [(b"host", b"a"), (b"X", b"b")]) is None
    cases = [
        ("1.1", [(b"transfer-encoding", b"chunked"), (b"CONTENT-LENGTH", b"3")], "both"),
        ("1.0", [(b"Transfer-Encoding", b"chunked")], "HTTP/1.0"),
        ("1.1", [(b"Content-Length", b"3, 3")], "2 times"),
        ("1.1", [(b"Content-Length", b"3"), (b"content-length", b"3")], "2 times"),
        ("1.1", [(b"Transfer-Encoding", b"chunked")] * 2, "2 times"),
        ("1.1", [(b"Host", b"a"), (b"host", b"a")], "Host"),
    ]
    for version, fields, said in cases:
        problem = framing_problem(version, fields)
        assert problem is not None and said in problem, (fields, problem)


# -- continue ---------------------------------------------------------------------------

WARNED = "http://social.example/feed?id=7"


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            assert found.get("method") == "post"
            self.action = found.get("action")
        elif tag == "input" and found.get("name"):
            self.fields[str(found["name"])] = found.get("value") or ""


def form_of(page: bytes) -> tuple[str, dict[str, str]]:
    parser = _Form()
    parser.feed(page.decode("utf-8"))
    assert parser.action is not None
    return parser.action, parser.fields


def continue_target(url: str) -> str:
    return "/v1/continue?url=" + quote(url, safe="")


def confirm_page(port: int, url: str, headers: list[tuple[str, str]]) -> bytes:
    """GET the continue link as a browser would: the confirmation page, and no grant."""
    status, got, page = call(port, "GET", continue_target(url), headers)
    assert status == 200, page
    assert got["content-type"].startswith("text/html")
    assert got["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in got["content-security-policy"]
    assert got["cache-control"] == "no-store"
    assert "location" not in got
    assert check(port, url)["action"] == "warn"  # nothing was granted
    return page


def post_form(
    port: int, fields: dict[str, str], headers: list[tuple[str, str]]
) -> tuple[int, dict[str, str], bytes]:
    body = urlencode(fields).encode()
    form = [("Content-Type", "application/x-www-form-urlencoded"), *headers]
    return call(port, "POST", "/v1/continue", form, body)


CROSS_SITE_GETS = {
    "img": [
        ("Referer", "http://evil.test/page"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "no-cors"),
        ("Sec-Fetch-Dest", "image"),
    ],
    "iframe": [
        ("Referer", "http://evil.test/page"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "iframe"),
    ],
    "link": [
        ("Referer", "http://evil.test/page"),
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-User", "?1"),
        ("Sec-Fetch-Dest", "document"),
    ],
    "no-headers": [],
}


def test_another_sites_page_grants_no_continue(serve_factory: Any) -> None:
    port = serve_factory("continue: attacks", PUPILS_ON_LOOPBACK)
    assert check(port, WARNED)["action"] == "warn"
    for headers in CROSS_SITE_GETS.values():
        confirm_page(port, WARNED, headers)
    evil_form = [("Origin", "http://evil.test"), ("Sec-Fetch-Site", "cross-site")]
    old_browser: list[tuple[str, str]] = []
    for headers in (evil_form, old_browser):
        for fields in ({"url": WARNED}, {"url": WARNED, "token": "1999999999.forged"}):
            status, got, body = post_form(port, fields, headers)
            assert status in (400, 403) and "location" not in got, body
    # A real token, for another URL or posted from another site, grants nothing either.
    _, fields = form_of(confirm_page(port, WARNED, []))
    other = "http://chat.example/"
    status, _, body = post_form(port, {**fields, "url": other}, [])
    assert (status, json.loads(body)["error"]) == (403, "unconfirmed_continue")
    status, _, body = post_form(port, fields, evil_form)
    assert (status, json.loads(body)["error"]) == (403, "cross_site_continue")
    assert check(port, WARNED)["action"] == "warn"
    assert check(port, other)["action"] == "warn"


def test_the_click_on_a_warning_page_from_another_host_grants_and_lands_on_the_url(
    serve_factory: Any,
) -> None:
    port = serve_factory("continue: clicks", PUPILS_ON_LOOPBACK)
    base = f"http://127.0.0.1:{port}"
    warning_page = "http://warn.test/?u=" + quote(WARNED, safe="") + "&t=social"
    # A current browser: the warning page (warn.test) links to the service.
    page = confirm_page(
        port,
        WARNED,
        [
            ("Referer", warning_page),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
            ("Sec-Fetch-User", "?1"),
            ("Sec-Fetch-Dest", "document"),
        ],
    )
    assert b"social" in page
    action, fields = form_of(page)
    assert urlsplit(urljoin(base + continue_target(WARNED), action)).path == "/v1/continue"
    status, got, body = post_form(
        port,
        fields,
        [
            ("Origin", base),
            ("Sec-Fetch-Site", "same-origin"),
            ("Sec-Fetch-Mode", "navigate"),
            ("Sec-Fetch-User", "?1"),
            ("Sec-Fetch-Dest", "document"),
        ],
    )
    assert status == 303, body
    assert got["location"] == WARNED
    assert check(port, WARNED)["action"] == "allow"
    # A browser that sends no Referer, Origin or Sec-Fetch-* at all.
    other = "http://chat.example/room/1"
    _, fields = form_of(confirm_page(port, other, []))
    status, got, body = post_form(port, fields, [])
    assert (status, got.get("location")) == (303, other), body
    assert check(port, other)["action"] == "allow"


def test_a_confirmation_is_tied_to_its_client_its_url_and_its_time(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, free_port(), '["10.0.1.0/24"]', f'token = "{TOKEN}"\ntrusted_proxies = []'
    )
    app = create_app(load_config(str(config), env={}))
    url = "http://social.example/"
    with (
        TestClient(app, client=("10.0.1.7", 5000)) as pupil,
        TestClient(app, client=("10.0.1.8", 5000)) as neighbour,
    ):
        page = neighbour.get("/v1/continue", params={"url": url})
        _, fields = form_of(page.content)
        r = pupil.post("/v1/continue", data=fields, follow_redirects=False)
        assert (r.status_code, r.json()["error"]) == (403, "unconfirmed_continue")
        key = continue_key(TOKEN)  # a service token makes the key shared by a fleet
        expired = confirmation(key, Who("10.0.1.7"), url, int(time.time()) - 1)
        r = pupil.post("/v1/continue", data={"url": url, "token": expired})
        assert r.status_code == 403
        fresh = confirmation(key, Who("10.0.1.7"), url, int(time.time()) + 60)
        r = pupil.post("/v1/continue", data={"url": url, "token": fresh}, follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (303, url)
        r = pupil.post("/v1/continue", content=b"url=%ff&token=\x00")
        assert r.status_code == 400
        r = pupil.post("/v1/continue", content=b"token=a&token=b&url=" + quote(url).encode())
        assert (r.status_code, r.json()["error"]) == (400, "invalid_form")
