"""The HTTP lookup service: in-process (Starlette TestClient) and on a real uvicorn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.gateway.servers import free_port
from urlsieve.gateway.config import GatewayConfig, load_config
from urlsieve.gateway.service import MAX_BATCH, create_app
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import ALLOW, BLOCK, parse_rule

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
        ("post", "/v1/check", {"json": ["http://a.com/"]}, (422, "invalid_body")),
        ("post", "/v1/check", {"json": {"urls": "http://a.com/"}}, (422, "invalid_body")),
        ("post", "/v1/check", {"json": {"urls": [1, 2]}}, (422, "invalid_body")),
        # A JSON escape of a lone surrogate: valid JSON, not encodable text.
        (
            "post",
            "/v1/check",
            {"content": rb'{"urls": ["http://a.com/\udc80"]}'},
            (422, "invalid_body"),
        ),
        (
            "post",
            "/v1/seen",
            {"content": rb'{"urls": ["http://a.com/\udc80"]}'},
            (422, "invalid_body"),
        ),
        (
            "post",
            "/v1/check",
            {"json": {"urls": ["x"] * (MAX_BATCH + 1)}},
            (413, "batch_too_large"),
        ),
        ("post", "/v1/seen", {"json": {"op": "delete", "urls": []}}, (422, "invalid_body")),
        ("post", "/v1/seen", {"json": {"urls": ["javascript:x"]}}, (422, "invalid_url")),
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
    r = client.post("/v1/seen", json={"urls": urls})  # op defaults to add
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
        "/v1/seen",
        "/v1/reload",
        "/metrics",
        "/healthz",
    }
    assert set(doc["paths"]["/v1/check"]) == {"get", "post"}


def test_service_from_lists(tmp_path: Path) -> None:
    lists = tmp_path / "blocked.txt"
    lists.write_text("evil.com\n@@evil.com/ok/\n")
    config = load_config(None, env={}, overrides={"lists": [str(lists)]})
    with TestClient(create_app(config)) as c:
        assert c.get("/v1/check", params={"url": "http://evil.com/"}).json()["action"] == "block"
        assert c.get("/healthz").json()["rules"]["source"] == "lists"


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


@pytest.fixture
def uvicorn_server(snapshot: Path, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    config = tmp_path / "urlsieve.toml"
    config.write_text(
        f'[rules]\nsnapshot = "{snapshot}"\n[service]\nbind = "127.0.0.1:{port}"\n'
        f'token = "{TOKEN}"\nseen_store = "memory:"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "urlsieve", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


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
