"""The HTTP lookup service: in-process (Starlette TestClient) and on a real uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.gateway.servers import free_port
from urlsieve import Filter
from urlsieve.gateway.config import GatewayConfig, load_config
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import ALLOW, BLOCK, parse_rule
from urlsieve.service.app import MAX_BATCH, ServiceLimits, create_app
from urlsieve.service.server import listen

TOKEN = "reload-token-0123456789"


def rules(extra: bool = False) -> list[Any]:
    out = [
        parse_rule("evil.com", BLOCK, "malware", "lists/malware/domains", 4),
        parse_rule("evil.com/public/", ALLOW, "allowed", "lists/allowed/urls", 2),
        parse_rule("ads.example", BLOCK, "ads", "lists/ads/domains", 9),
    ]
    if extra:
        out.append(parse_rule("new-threat.org", BLOCK, "phishing", "lists/phishing/domains", 1))
    return out


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "rules.snap"
    compile_snapshot(rules(), path)
    return path


def config_for(snapshot: Path, **kw: Any) -> GatewayConfig:
    return load_config(
        None,
        env={},
        overrides={"snapshot": str(snapshot), "token": TOKEN, "seen_store": "memory:", **kw},
    )


@pytest.fixture
def client(snapshot: Path) -> Iterator[TestClient]:
    with TestClient(create_app(config_for(snapshot, reload_check_seconds=3600))) as c:
        yield c


def test_check_one(client: TestClient) -> None:
    r = client.get("/v1/check", params={"url": "HTTP://WWW.Evil.COM:80/x"})
    assert r.status_code == 200
    assert r.json() == {
        "url": "HTTP://WWW.Evil.COM:80/x",
        "action": "block",
        "category": "malware",
        "canonical": "http://www.evil.com/x",
        "rule": {
            "pattern": "evil.com",
            "action": "block",
            "category": "malware",
            "source": "lists/malware/domains",
            "line": 4,
        },
    }
    r = client.get("/v1/check", params={"url": "http://evil.com/public/a"})
    assert (r.json()["action"], r.json()["category"]) == ("allow", "allowed")
    r = client.get("/v1/check", params={"url": "http://good.org/"})
    assert (r.json()["action"], r.json()["rule"]) == ("none", None)


def test_check_batch(client: TestClient) -> None:
    urls = ["http://evil.com/", "http://good.org/", "javascript:alert(1)", "http://ads.example/"]
    r = client.post("/v1/check", json={"urls": urls})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x.get("action") for x in results] == ["block", "none", None, "block"]
    assert results[2]["error"] == "invalid_url"
    assert [x["url"] for x in results] == urls


def test_big_batch_is_checked_off_the_event_loop(client: TestClient) -> None:
    urls = [f"http://h{i}.evil.com/" if i % 2 else f"http://h{i}.ok.org/" for i in range(2000)]
    results = client.post("/v1/check", json={"urls": urls}).json()["results"]
    assert [r["action"] for r in results] == ["none", "block"] * 1000


def test_explain(client: TestClient) -> None:
    r = client.get("/v1/explain", params={"url": "http://a.evil.com/public/x"})
    body = r.json()
    assert r.status_code == 200
    assert body["canonical"] == "http://a.evil.com/public/x"
    assert body["action"] == "allow"
    assert body["rule"]["pattern"] == "evil.com/public/"
    assert "evil.com/public/" in body["probes"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "expected"),
    [
        ("get", "/v1/check", {}, (400, "missing_url")),
        ("get", "/v1/check", {"params": {"url": " "}}, (400, "missing_url")),
        ("get", "/v1/check", {"params": {"url": "javascript:x"}}, (422, "invalid_url")),
        ("get", "/v1/check", {"params": {"url": "http://exa mple.com/"}}, (422, "invalid_url")),
        ("get", "/v1/explain", {"params": {"url": "data:,x"}}, (422, "invalid_url")),
        ("post", "/v1/check", {"content": b"{not json"}, (400, "invalid_json")),
        ("post", "/v1/check", {"content": b"\xff\xfe"}, (400, "invalid_json")),
        ("post", "/v1/check", {"json": ["http://a.com/"]}, (400, "invalid_body")),
        ("post", "/v1/check", {"json": {"urls": "http://a.com/"}}, (400, "invalid_body")),
        ("post", "/v1/check", {"json": {"urls": [1, 2]}}, (400, "invalid_body")),
        ("post", "/v1/check", {"json": {"urls": [["http://a.com/"]]}}, (400, "invalid_body")),
        ("post", "/v1/check", {"json": {"url": ["http://a.com/"]}}, (400, "invalid_body")),
        # Deep nesting: a RecursionError in the JSON parser (a 500 before).
        ("post", "/v1/check", {"content": b"[" * 100_000}, (400, "invalid_json")),
        ("post", "/v1/check", {"content": b'{"urls": ' + b"[" * 5000}, (400, "invalid_json")),
        # Numbers: no field takes one; long ones are refused before conversion.
        (
            "post",
            "/v1/check",
            {"content": b'{"urls": [], "n": ' + b"9" * 5000 + b"}"},
            (400, "invalid_json"),
        ),
        ("post", "/v1/check", {"content": b'{"urls": [1e999999]}'}, (400, "invalid_json")),
        ("post", "/v1/check", {"content": b'{"urls": [NaN]}'}, (400, "invalid_json")),
        (
            "post",
            "/v1/check",
            {"content": b'{"urls": [], "urls": ["http://a.com/"]}'},
            (400, "invalid_json"),
        ),
        # Not UTF-8 (Latin-1, UTF-16): said with the byte and its offset.
        (
            "post",
            "/v1/check",
            {"content": b'{"urls": ["http://a.com/\xe9"]}'},
            (400, "invalid_json"),
        ),
        ("post", "/v1/check", {"content": '{"urls": []}'.encode("utf-16")}, (400, "invalid_json")),
        ("post", "/v1/check", {"content": b""}, (400, "invalid_json")),
        (
            "get",
            "/v1/check",
            {"params": [("url", "http://a.com/"), ("url", "http://evil.com/")]},
            (400, "repeated_url"),
        ),
        ("get", "/v1/explain", {"params": [("url", "a.com"), ("url", "")]}, (400, "repeated_url")),
        ("get", "/v1/check?url=http://evil.com/%FF", {}, (400, "invalid_query")),
        # A JSON escape of a lone surrogate: valid JSON, not encodable text.
        (
            "post",
            "/v1/check",
            {"content": rb'{"urls": ["http://a.com/\udc80"]}'},
            (400, "invalid_body"),
        ),
        (
            "post",
            "/v1/seen",
            {"content": rb'{"op": "add", "urls": ["http://a.com/\udc80"]}'},
            (400, "invalid_body"),
        ),
        (
            "post",
            "/v1/check",
            {"json": {"urls": ["x"] * (MAX_BATCH + 1)}},
            (413, "batch_too_large"),
        ),
        ("post", "/v1/seen", {"json": {"op": "delete", "urls": []}}, (400, "invalid_body")),
        ("post", "/v1/seen", {"json": {"op": ["add"], "urls": []}}, (400, "invalid_body")),
        # A missing op is an error, not an "add" (which would mark URLs seen by surprise).
        ("post", "/v1/seen", {"json": {"urls": ["http://a.com/"]}}, (400, "invalid_body")),
        ("get", "/v1/nothing", {}, (404, "not_found")),
        ("delete", "/v1/check", {}, (405, "method_not_allowed")),
        ("post", "/v1/reload", {}, (401, "unauthorized")),
        (
            "post",
            "/v1/reload",
            {"headers": {"Authorization": "Bearer nope"}},
            (401, "unauthorized"),
        ),
        (
            "post",
            "/v1/reload",
            {"headers": {"Authorization": f"Basic {TOKEN}"}},
            (401, "unauthorized"),
        ),
    ],
)
def test_bad_requests_get_4xx_with_a_json_error(
    client: TestClient, method: str, path: str, kwargs: dict[str, Any], expected: tuple[int, str]
) -> None:
    status, code = expected
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code
    assert isinstance(body["detail"], str) and body["detail"]


def test_seen_add_and_test(client: TestClient) -> None:
    urls = ["http://a.com/x", "HTTP://A.COM:80/x", "http://b.com/"]
    r = client.post("/v1/seen", json={"op": "test", "urls": urls})
    assert r.json() == {"op": "test", "seen": [False, False, False]}
    r = client.post("/v1/seen", json={"op": "add", "urls": urls})
    assert r.json() == {"op": "add", "new": [True, False, True]}
    r = client.post("/v1/seen", json={"op": "test", "urls": [*urls, "http://c.com/"]})
    assert r.json()["seen"] == [True, True, True, False]


def test_seen_without_a_store_is_404(snapshot: Path) -> None:
    config = load_config(None, env={}, overrides={"snapshot": str(snapshot)})
    with TestClient(create_app(config)) as c:
        r = c.post("/v1/seen", json={"urls": ["http://a.com/"]})
        assert r.status_code == 404 and r.json()["error"] == "no_seen_store"
        r = c.post("/v1/reload", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 403 and r.json()["error"] == "reload_disabled"


def test_reload_with_token(client: TestClient, snapshot: Path) -> None:
    assert (
        client.get("/v1/check", params={"url": "http://new-threat.org/"}).json()["action"] == "none"
    )
    compile_snapshot(rules(extra=True), snapshot)
    r = client.post("/v1/reload", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert r.json()["reloaded"] is True
    assert r.json()["rules"]["generation"] == 2
    assert r.json()["rules"]["rules"] == 4
    assert (
        client.get("/v1/check", params={"url": "http://new-threat.org/"}).json()["action"]
        == "block"
    )


def test_failed_reload_keeps_the_rules_and_says_why(client: TestClient, snapshot: Path) -> None:
    # Replaced by rename, as `urlsieve compile` does: never rewrite a mapped file in place.
    bad = snapshot.with_suffix(".new")
    bad.write_bytes(b"not a snapshot at all" * 20)
    os.replace(bad, snapshot)
    r = client.post("/v1/reload", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 409
    assert "not a urlsieve snapshot" in r.json()["detail"]
    assert client.get("/v1/check", params={"url": "http://evil.com/"}).json()["action"] == "block"
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and "not a urlsieve snapshot" in health["last_reload_error"]


def test_healthz_and_no_rules(client: TestClient, tmp_path: Path) -> None:
    body = client.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["rules"]["source"] == "snapshot"
    assert body["rules"]["rules"] == 3
    assert len(body["rules"]["version"]) == 16
    config = load_config(None, env={}, overrides={"snapshot": str(tmp_path / "missing.snap")})
    with TestClient(create_app(config)) as c:
        r = c.get("/healthz")
        assert r.status_code == 503 and "cannot open" in r.json()["detail"]
        r = c.get("/v1/check", params={"url": "http://a.com/"})
        assert r.status_code == 503 and r.json()["error"] == "no_rules"
        assert "urlsieve_rules_loaded 0" in c.get("/metrics").text


def test_metrics(client: TestClient) -> None:
    client.get("/v1/check", params={"url": "http://evil.com/"})
    client.post(
        "/v1/check", json={"urls": ["http://evil.com/a", "http://ads.example/", "http://x.org/"]}
    )
    client.get("/v1/check")  # a 400
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert 'urlsieve_decisions_total{action="block",category="malware"} 2' in text
    assert 'urlsieve_decisions_total{action="block",category="ads"} 1' in text
    assert 'urlsieve_decisions_total{action="none",category="-"} 1' in text
    assert 'urlsieve_http_requests_total{endpoint="/v1/check",method="GET",status="200"} 1' in text
    assert 'urlsieve_http_requests_total{endpoint="/v1/check",method="GET",status="400"} 1' in text
    assert 'urlsieve_http_requests_total{endpoint="/v1/check",method="POST",status="200"} 1' in text
    assert 'urlsieve_http_request_duration_seconds_bucket{endpoint="/v1/check",le="+Inf"} 3' in text
    assert 'urlsieve_http_request_duration_seconds_count{endpoint="/v1/check"} 3' in text
    assert "urlsieve_rules_generation 1" in text
    assert "urlsieve_snapshot_age_seconds " in text
    assert 'urlsieve_snapshot_info{version="' in text and 'rules="3"' in text
    # Every sample line is "name{labels} value" with a numeric value.
    for line in text.splitlines():
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_openapi_document(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {
        "/v1/check",
        "/v1/explain",
        "/v1/continue",
        "/v1/pending",
        "/v1/seen",
        "/v1/reload",
        "/metrics",
        "/healthz",
        # The block pages and the console (urlsieve.service.console), HTML
        "/block",
        "/block/review",
        "/static/urlsieve/{name}",
        "/console",
        "/console/",
        "/console/events",
        "/console/login",
        "/console/logout",
        "/console/explain",
        "/console/review",
        "/console/policy",
    }
    assert set(doc["paths"]["/v1/check"]) == {"get", "post"}
    # Without a policy (and its warn store) there is nothing to continue past.
    r = client.get("/v1/continue", params={"url": "http://a.com/"})
    assert (r.status_code, r.json()["error"]) == (404, "no_warn_store")


def test_service_from_lists(tmp_path: Path) -> None:
    lists = tmp_path / "blocked.txt"
    lists.write_text("evil.com\n@@evil.com/ok/\n")
    config = load_config(None, env={}, overrides={"lists": [str(lists)]})
    with TestClient(create_app(config)) as c:
        assert c.get("/v1/check", params={"url": "http://evil.com/"}).json()["action"] == "block"
        assert c.get("/healthz").json()["rules"]["source"] == "lists"


def test_seen_answers_each_url_and_reports_bad_ones_in_place(client: TestClient) -> None:
    # One bad URL used to fail the whole batch (422) and mark nothing.
    urls = ["http://a.com/", "javascript:alert(1)", "http://b.com/", "http://a.com:80/"]
    r = client.post("/v1/seen", json={"op": "add", "urls": urls})
    assert r.status_code == 200
    new = r.json()["new"]
    assert [new[0], new[2], new[3]] == [True, True, False]
    assert new[1]["url"] == "javascript:alert(1)" and new[1]["error"] == "invalid_url"
    assert new[1]["detail"]
    seen = client.post("/v1/seen", json={"op": "test", "urls": urls}).json()["seen"]
    assert [seen[0], seen[2], seen[3]] == [True, True, True]
    assert seen[1]["error"] == "invalid_url"
    text = client.get("/metrics").text
    assert 'urlsieve_seen_total{op="add",result="true"} 2' in text
    assert 'urlsieve_seen_total{op="add",result="false"} 1' in text


# -- the body is read against a cap, chunk by chunk ----------------------------------------


def _post_chunks(
    app: Any, chunks: int, size: int, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, dict[str, Any], int, list[tuple[bytes, bytes]]]:
    """POST /v1/check as ``chunks`` body messages of ``size`` bytes, straight to the ASGI app.

    Returns the status, the JSON body, how many body messages the app asked for, and
    the response headers.
    """
    received = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": "http.request", "body": b"x" * size, "more_body": received < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/check",
        "raw_path": b"/v1/check",
        "query_string": b"",
        "root_path": "",
        "headers": headers or [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8399),
    }

    async def run() -> None:
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    anyio.run(run)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], json.loads(body), received, start["headers"]


def test_body_over_the_cap_is_refused_while_it_is_read(snapshot: Path) -> None:
    # 1,000 chunks of 1 KiB against a 4 KiB cap: the service stops after the fifth
    # (it used to read the whole body, then compare its size).
    app = create_app(config_for(snapshot), limits=ServiceLimits(max_body=4096))
    status, body, received, headers = _post_chunks(app, chunks=1000, size=1024)
    assert (status, body["error"]) == (413, "body_too_large")
    assert "4096 bytes" in body["detail"]
    assert received == 5
    assert (b"connection", b"close") in headers


def test_declared_length_over_the_cap_is_refused_before_reading(snapshot: Path) -> None:
    app = create_app(config_for(snapshot), limits=ServiceLimits(max_body=4096))
    for declared in (b"4097", b"9" * 40):
        status, body, received, _ = _post_chunks(
            app, chunks=1000, size=1024, headers=[(b"content-length", declared)]
        )
        assert (status, body["error"], received) == (413, "body_too_large", 0)
    status, body, received, _ = _post_chunks(
        app, chunks=1, size=10, headers=[(b"content-length", b"\xd9\xa3")]
    )
    assert (status, body["error"], received) == (400, "invalid_content_length", 0)


def test_a_body_at_the_cap_is_read(snapshot: Path) -> None:
    app = create_app(config_for(snapshot), limits=ServiceLimits(max_body=4096))
    status, body, received, _ = _post_chunks(app, chunks=4, size=1024)
    assert (status, body["error"], received) == (400, "invalid_json", 4)  # read, then parsed


# -- no request bytes give a 5xx ------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
_urls = st.text(max_size=60) | st.sampled_from(
    ["http://evil.com/", "HTTP://A.com:80/x?y#z", "javascript:x", "http://[::1]:99/", "a" * 300]
)
_bodies = st.one_of(
    st.binary(max_size=300),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda op, urls, extra: json.dumps({"op": op, "urls": urls, **extra}).encode(),
        st.sampled_from(["add", "test", None, 1, "", "ADD"]),
        st.lists(_urls | _json_values, max_size=5),
        st.dictionaries(st.text(max_size=4), _json_values, max_size=2),
    ),
    st.binary(max_size=50).map(lambda b: b'{"op": "add", "urls": ["' + b + b'"]}'),
)
_queries = st.one_of(
    st.text(alphabet="url=&%+;#?/:.aeFF09 \\", max_size=40),
    st.lists(st.binary(max_size=60).map(quote_from_bytes), max_size=3).map(
        lambda values: "&".join("url=" + v for v in values)
    ),
)
_METHODS = ["GET", "POST", "PUT", "HEAD", "OPTIONS", "FOO", "get", "M-SEARCH"]
_PATHS = ["/v1/check", "/v1/explain", "/v1/seen", "/v1/reload", "/metrics", "/healthz", "/x"]


def test_no_request_bytes_give_a_server_error(snapshot: Path) -> None:
    config = config_for(snapshot, reload_check_seconds=3600)
    with TestClient(create_app(config, limits=ServiceLimits(max_body=1 << 16))) as c:

        @given(
            method=st.sampled_from(_METHODS),
            path=st.sampled_from(_PATHS),
            query=_queries,
            body=_bodies,
        )
        def answer(method: str, path: str, query: str, body: bytes) -> None:
            r = c.request(method, f"{path}?{query}", content=body)
            assert r.status_code < 500, (r.status_code, r.text)
            if r.status_code >= 400 and method != "HEAD":
                error = r.json()
                assert isinstance(error["error"], str) and isinstance(error["detail"], str)

        answer()


# -- metrics: bounded labels, and every reload counted -----------------------------------------


def test_metric_labels_stay_bounded_whatever_the_method(client: TestClient) -> None:
    for i in range(20):
        client.request(f"X-METHOD-{i}", "/v1/check")
        client.request("GET", f"/random/{i}")
    text = client.get("/metrics").text
    assert "X-METHOD" not in text and "/random/" not in text
    assert (
        'urlsieve_http_requests_total{endpoint="/v1/check",method="other",status="405"} 20' in text
    )
    assert 'urlsieve_http_requests_total{endpoint="other",method="GET",status="404"} 20' in text


def _metric(client: TestClient, line: str) -> int:
    for sample in client.get("/metrics").text.splitlines():
        if sample.startswith(line + " "):
            return int(sample.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line} in /metrics")


def _wait_for(client: TestClient, line: str, value: int) -> None:
    for _ in range(200):  # the reloader checks the file every 0.1 s: at most ~20 s
        if _metric(client, line) == value:
            return
        time.sleep(0.1)
    raise AssertionError(f"{line} never reached {value}")


def test_file_change_reloads_are_counted_failed_ones_too(snapshot: Path) -> None:
    # Only API reloads used to be counted, so a broken snapshot deployed by file
    # change could not alert.
    ok, failed = 'urlsieve_reloads_total{result="ok"}', 'urlsieve_reloads_total{result="failed"}'
    with TestClient(create_app(config_for(snapshot, reload_check_seconds=0))) as c:
        assert (_metric(c, ok), _metric(c, failed)) == (0, 0)
        bad = snapshot.with_suffix(".new")
        bad.write_bytes(b"not a snapshot at all" * 20)
        os.replace(bad, snapshot)
        _wait_for(c, failed, 1)
        assert c.get("/v1/check", params={"url": "http://evil.com/"}).json()["action"] == "block"
        compile_snapshot(rules(extra=True), snapshot)
        _wait_for(c, ok, 1)
        assert (
            c.get("/v1/check", params={"url": "http://new-threat.org/"}).json()["action"] == "block"
        )
        c.post("/v1/reload", headers={"Authorization": f"Bearer {TOKEN}"})
        assert (_metric(c, ok), _metric(c, failed)) == (2, 1)


def test_the_reloader_outlives_any_load_error(snapshot: Path) -> None:
    calls = {"n": 0, "broken": False}

    def load() -> Filter:
        calls["n"] += 1
        if calls["broken"]:
            raise RuntimeError("a bug in a loader")
        return Filter.load(snapshot)

    log: list[str] = []
    config = config_for(snapshot, reload_check_seconds=0)
    with TestClient(create_app(config, load=load, log=log.append)) as c:
        calls["broken"] = True
        compile_snapshot(rules(extra=True), snapshot)
        for _ in range(200):  # bounded: until the reloader has tried the broken load
            if calls["n"] > 1:
                break
            time.sleep(0.05)
        assert c.get("/v1/check", params={"url": "http://evil.com/"}).json()["action"] == "block"
        calls["broken"] = False
        _wait_for(c, 'urlsieve_reloads_total{result="ok"}', 1)
        assert (
            c.get("/v1/check", params={"url": "http://new-threat.org/"}).json()["action"] == "block"
        )
    assert any("a bug in a loader" in line for line in log)


# -- checks off the event loop ------------------------------------------------------------------


class _ThreadRecorder:
    """A Filter stand-in recording the thread each check runs in."""

    def __init__(self) -> None:
        self.inner = Filter.from_rules(["evil.com"])
        self.threads: set[int] = set()

    def check(self, url: str) -> Any:
        self.threads.add(threading.get_ident())
        return self.inner.check(url)

    def explain(self, url: str) -> Any:
        self.threads.add(threading.get_ident())
        return self.inner.explain(url)


def _loop_thread(c: TestClient) -> int:
    async def ident() -> int:
        return threading.get_ident()

    assert c.portal is not None
    return c.portal.call(ident)


@pytest.mark.parametrize(
    ("request_", "off_loop"),
    [
        (("get", "/v1/check", {"params": {"url": "http://evil.com/x"}}), False),
        (("post", "/v1/check", {"json": {"urls": ["http://evil.com/"] * 10}}), False),
        (("post", "/v1/check", {"json": {"urls": ["http://evil.com/"] * 2000}}), True),
        (("post", "/v1/check", {"json": {"urls": ["http://evil.com/" + "a" * 20_000]}}), True),
        (("get", "/v1/check", {"params": {"url": "http://evil.com/" + "a" * 20_000}}), True),
        (("get", "/v1/explain", {"params": {"url": "http://evil.com/" + "a" * 20_000}}), True),
    ],
)
def test_large_work_runs_off_the_event_loop(
    snapshot: Path, request_: tuple[str, str, dict[str, Any]], off_loop: bool
) -> None:
    recorder = _ThreadRecorder()
    app = create_app(config_for(snapshot), load=lambda: recorder)  # type: ignore[arg-type,return-value]
    with TestClient(app) as c:
        method, path, kwargs = request_
        assert getattr(c, method)(path, **kwargs).status_code == 200
        loop = _loop_thread(c)
    assert recorder.threads
    assert (loop not in recorder.threads) is off_loop


# -- a real uvicorn --------------------------------------------------------------------


def _get(
    url: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
            return resp.status, json.loads(
                body
            ) if resp.headers.get_content_type() == "application/json" else body.decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


@contextlib.contextmanager
def running(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A service process started with ``argv``, once /healthz answers on ``port``."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "exited")
            try:
                if _get(base + "/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("uvicorn did not start")
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


@pytest.fixture
def uvicorn_process(
    snapshot: Path, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``urlsieve serve`` in its own process; the file watcher is off (SIGHUP or API only)."""
    port = free_port()
    config = tmp_path / "urlsieve.toml"
    config.write_text(
        f'[rules]\nsnapshot = "{snapshot}"\n[squid]\nreload_check_seconds = 3600\n'
        f'[service]\nbind = "127.0.0.1:{port}"\ntoken = "{TOKEN}"\nseen_store = "memory:"\n'
    )
    argv = [sys.executable, "-m", "urlsieve", "serve", "--config", str(config)]
    with running(argv, port) as proc:
        yield f"http://127.0.0.1:{port}", proc


@pytest.fixture
def uvicorn_server(uvicorn_process: tuple[str, subprocess.Popen[bytes]]) -> str:
    return uvicorn_process[0]


def test_real_uvicorn(uvicorn_server: str, snapshot: Path) -> None:
    status, body = _get(uvicorn_server + "/v1/check?url=http%3A%2F%2Fwww.evil.com%2F")
    assert status == 200 and body["action"] == "block"
    status, body = _get(
        uvicorn_server + "/v1/check",
        data=json.dumps({"urls": ["http://ads.example/x", "http://fine.org/"]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert [r["action"] for r in body["results"]] == ["block", "none"]
    status, body = _get(uvicorn_server + "/v1/check")
    assert status == 400 and body["error"] == "missing_url"
    compile_snapshot(rules(extra=True), snapshot)
    status, body = _get(
        uvicorn_server + "/v1/reload", data=b"", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200 and body["rules"]["rules"] == 4
    status, body = _get(uvicorn_server + "/v1/check?url=new-threat.org")
    assert body["action"] == "block"
    status, text = _get(uvicorn_server + "/metrics")
    assert status == 200 and 'urlsieve_reloads_total{result="ok"} 1' in text


def _action(base: str, url: str) -> str:
    status, body = _get(base + "/v1/check?url=" + urllib.parse.quote(url, safe=""))
    assert status == 200, body
    action: str = body["action"]
    return action


def test_sighup_reloads_and_the_process_lives(
    uvicorn_process: tuple[str, subprocess.Popen[bytes]], snapshot: Path
) -> None:
    # uvicorn does not handle SIGHUP: `urlsieve serve` used to die of it.
    base, proc = uvicorn_process
    assert _action(base, "http://new-threat.org/") == "none"
    compile_snapshot(rules(extra=True), snapshot)
    proc.send_signal(signal.SIGHUP)
    for _ in range(100):  # bounded: at most ~10 s
        if _action(base, "http://new-threat.org/") == "block":
            break
        time.sleep(0.1)
    assert _action(base, "http://new-threat.org/") == "block"
    assert proc.poll() is None
    assert 'urlsieve_reloads_total{result="ok"} 1' in _get(base + "/metrics")[1]
    # A broken snapshot and SIGHUP: the old rules stay, the failure is counted.
    bad = snapshot.with_suffix(".new")
    bad.write_bytes(b"not a snapshot" * 40)
    os.replace(bad, snapshot)
    proc.send_signal(signal.SIGHUP)
    for _ in range(100):
        if 'urlsieve_reloads_total{result="failed"} 1' in _get(base + "/metrics")[1]:
            break
        time.sleep(0.1)
    assert 'urlsieve_reloads_total{result="failed"} 1' in _get(base + "/metrics")[1]
    assert _action(base, "http://new-threat.org/") == "block"
    assert proc.poll() is None


# -- uvicorn's edges: header timeout, connection cap, body timeout (raw sockets) -------------

_GUARDED = """
import sys
from urlsieve.gateway.config import load_config
from urlsieve.service.server import serve
from urlsieve.service.app import ServiceLimits, create_app

snapshot, port, header_timeout, max_connections = sys.argv[1:]
config = load_config(None, env={}, overrides={"snapshot": snapshot})
limits = ServiceLimits(
    header_timeout=float(header_timeout),
    body_timeout=float(header_timeout),
    max_connections=int(max_connections),
)
serve(create_app(config, limits=limits), "127.0.0.1", int(port), limits=limits)
"""


@contextlib.contextmanager
def guarded_server(snapshot: Path, header_timeout: float, max_connections: int) -> Iterator[int]:
    port = free_port()
    argv = [sys.executable, "-c", _GUARDED, str(snapshot), str(port)]
    with running([*argv, str(header_timeout), str(max_connections)], port):
        yield port


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the socket has a timeout)."""
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (status line, headers, Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def test_slow_headers_are_cut_off(snapshot: Path) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nUser-Agent: slowloris\r\n\r\n"
    with guarded_server(snapshot, header_timeout=0.5, max_connections=50) as port:
        # One byte every 0.1 s: the headers would take 5 s, the server gives 0.5 s.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sent = 0
            for byte in request:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:  # reset once the server closed
                    break
                sent += 1
                time.sleep(0.1)
            reply = _read_all(sock)
        assert sent < len(request)
        assert reply.startswith(b"HTTP/1.1 408 ") and b"header_timeout" in reply
        # A client that connects and says nothing is cut off too.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert _read_all(sock).startswith(b"HTTP/1.1 408 ")
        # A slow body: 10 of 100 bytes, then silence.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"{" * 10
            )
            reply = _read_all(sock)
        assert reply.startswith(b"HTTP/1.1 408 ") and b"body_timeout" in reply
        # A prompt client on a kept-alive connection is served, twice.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for _ in range(2):
                sock.sendall(request)
                assert _read_response(sock).startswith(b"HTTP/1.1 200 ")


def test_the_service_socket_answers_without_nagle() -> None:
    # asyncio turns Nagle's algorithm off only on connections of a socket made with
    # IPPROTO_TCP; with it on, each response on a kept-alive connection waited 40 ms for
    # the client's delayed ACK (363 requests/s under wrk instead of thousands).
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]

    async def nodelay_of_an_accepted_connection() -> int:
        loop = asyncio.get_running_loop()
        seen: asyncio.Future[int] = loop.create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                server_side = transport.get_extra_info("socket")
                seen.set_result(server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = await loop.create_server(Probe, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(nodelay_of_an_accepted_connection()) != 0


def test_connections_over_the_cap_are_refused(snapshot: Path) -> None:
    with guarded_server(snapshot, header_timeout=30, max_connections=3) as port:
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
                reply = _read_all(extra)
            assert reply.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in reply
            held.pop().close()
            for _ in range(50):  # the server notices the close shortly: bounded retries
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    if _read_response(sock).startswith(b"HTTP/1.1 200 "):
                        break
                time.sleep(0.1)
            else:
                raise AssertionError("a freed connection slot was never reused")
        finally:
            for sock in held:
                sock.close()
