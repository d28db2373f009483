"""The lookup service deciding by a policy: who asks is the peer address, or what a trusted
proxy says (fields or headers); an untrusted caller cannot claim another identity; metrics
count decisions by source and ACL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.policy import sgpolicy
from urlsieve.gateway.config import load_config
from urlsieve.service.app import create_app


@pytest.fixture
def native(tmp_path: Path) -> Path:
    sgpolicy.write_tree(tmp_path)
    path = sgpolicy.write_native(tmp_path)
    # Every client is in the students' lessons: pin no clock, use a time-free ACL instead.
    text = path.read_text().replace(
        'within = "lessons"\npass = ["good", "!porn", "!games"', 'pass = ["good", "!porn", "!games"'
    )
    text = text.replace(
        '\n[acl.else]\npass = ["good", "!porn", "!warez", "!in-addr", "all"]\nredirect = "http://block.test/students-free?t=%t"',
        "",
    )
    path.write_text(
        text
        + '\n[service]\ntrusted_proxies = ["10.9.9.9"]\n'
        + 'client_header = "X-Forwarded-For"\nuser_header = "X-Authenticated-User"\n'
    )
    return path


def app_client(config: Path, peer: str) -> TestClient:
    return TestClient(create_app(load_config(str(config), env={})), client=(peer, 40000))


@pytest.fixture
def student(native: Path) -> Iterator[TestClient]:
    with app_client(native, "10.0.1.5") as c:
        yield c


def test_the_peer_address_chooses_the_source(student: TestClient) -> None:
    r = student.get("/v1/check", params={"url": "http://games.example/x"})
    assert r.status_code == 200
    body = r.json()
    assert (body["action"], body["category"]) == ("block", "games")
    assert body["policy"]["source"] == "students" and body["policy"]["acl"] == "students"
    assert body["policy"]["target"] == "http://block.test/students?t=%t&s=%s&p=%p"
    r = student.get("/v1/check", params={"url": "http://school.example/"})
    assert r.json()["action"] == "allow" and r.json()["policy"]["decided_by"] == "good"
    r = student.post(
        "/v1/check", json={"urls": ["http://1.2.3.4/", "http://x y/", "http://other.test/"]}
    )
    results = r.json()["results"]
    assert results[0]["category"] == "in-addr"
    assert results[1]["error"] == "invalid_url"
    assert results[2]["action"] == "allow"


def test_an_untrusted_peer_cannot_claim_another_identity(student: TestClient) -> None:
    r = student.get("/v1/check", params={"url": "http://games.example/", "user": "root"})
    assert r.status_code == 403 and r.json()["error"] == "untrusted_client_fields"
    r = student.post("/v1/check", json={"urls": ["http://games.example/"], "client": "10.0.9.1"})
    assert r.status_code == 403
    # Headers from an untrusted peer are ignored: still the student's decision.
    r = student.get(
        "/v1/check",
        params={"url": "http://games.example/"},
        headers={"X-Forwarded-For": "10.0.9.1", "X-Authenticated-User": "root"},
    )
    assert r.json()["policy"]["source"] == "students"


def test_a_trusted_proxy_names_the_client(native: Path) -> None:
    with app_client(native, "10.9.9.9") as proxy:
        r = proxy.get(
            "/v1/check",
            params={"url": "http://warez.example/"},
            headers={"X-Forwarded-For": "10.0.9.1", "X-Authenticated-User": "root"},
        )
        assert r.json()["policy"]["source"] == "admins" and r.json()["action"] == "block"
        r = proxy.get(
            "/v1/check",
            params={"url": "http://games.example/"},
            headers={"X-Forwarded-For": "203.0.113.7, 10.0.1.9"},
        )
        assert r.json()["policy"]["source"] == "students"  # the last hop the proxy saw
        r = proxy.post(
            "/v1/check",
            json={"urls": ["http://games.example/"]},
            headers={"X-Forwarded-For": "172.16.0.1"},
        )
        assert r.json()["results"][0]["policy"]["source"] == "default"
        assert r.json()["results"][0]["action"] == "allow"
        r = proxy.get("/v1/check", params={"url": "http://a.test/", "client_name": ["a", "b"]})
        assert r.status_code == 400
        metrics = proxy.get("/metrics").text
        assert (
            'urlsieve_policy_decisions_total{source="admins",acl="admins",action="block"} 1'
            in metrics
        )
        assert (
            'urlsieve_policy_decisions_total{source="default",acl="default",action="pass"} 1'
            in metrics
        )
        assert proxy.get("/healthz").status_code == 200


def test_a_field_the_proxy_names_in_a_header_cannot_come_from_the_query(native: Path) -> None:
    """Behind a proxy that names the client in X-Forwarded-For, ?client= is the client's
    own claim (the proxy passes the query on): refused."""
    with app_client(native, "10.9.9.9") as proxy:
        r = proxy.get(
            "/v1/check",
            params={"url": "http://games.example/", "client": "10.0.9.1"},
            headers={"X-Forwarded-For": "10.0.1.9"},
        )
        assert r.status_code == 403
        r = proxy.get(
            "/v1/check",
            params={"url": "http://games.example/", "client_name": "pc.lab"},
            headers={"X-Forwarded-For": "10.0.1.9"},
        )
        assert r.status_code == 200  # no header names the client name


def test_without_headers_a_trusted_proxy_names_the_client_in_fields(native: Path) -> None:
    text = native.read_text().replace('client_header = "X-Forwarded-For"\n', "")
    native.write_text(text.replace('user_header = "X-Authenticated-User"\n', ""))
    with app_client(native, "10.9.9.9") as proxy:
        r = proxy.get(
            "/v1/check",
            params={"url": "http://warez.example/", "client": "10.0.9.1", "user": "root"},
        )
        assert r.json()["policy"]["source"] == "admins" and r.json()["action"] == "block"
        r = proxy.post("/v1/check", json={"urls": ["http://games.example/"], "client": "10.0.1.9"})
        assert r.json()["results"][0]["policy"]["source"] == "students"
