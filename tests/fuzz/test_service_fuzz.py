"""The lookup service over hostile requests (Starlette TestClient): every answer is below
500, no spelling of a blocked URL is reported as allowed, and request methods do not
become metric labels."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.fuzz.budget import FUZZ
from tests.fuzz.corpus import SEEDS
from tests.fuzz.policy import rules_filter, write_lists
from tests.fuzz.strategies import blocked_spellings, hostile_lines
from urlsieve.gateway.config import load_config
from urlsieve.service.app import create_app

TOKEN = "fuzz-token-0123456789abcdef"
#: httpx refuses longer URLs itself ("URL too long").
CLIENT_URL_LIMIT = 60_000
_PRINTABLE = "".join(map(chr, range(0x21, 0x7F)))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    block, allow = write_lists(tmp_path_factory.mktemp("lists"))
    overrides = {"lists": [str(block)], "allow": [str(allow)], "token": TOKEN}
    config = load_config(None, env={}, overrides={**overrides, "seen_store": "memory:"})
    with TestClient(create_app(config, load=rules_filter), raise_server_exceptions=False) as c:
        yield c


def as_text(url: bytes) -> str:
    """A URL as a client sends it over HTTP/JSON: bytes that are not UTF-8 as ``%XX``."""
    return quote_from_bytes(url, safe=_PRINTABLE)


def query(url: bytes) -> str:
    return quote_from_bytes(url, safe="")


def check(response: object, what: str) -> None:
    status = response.status_code  # type: ignore[attr-defined]
    assert status < 500, f"{what}: {status} {response.text[:300]!r}"  # type: ignore[attr-defined]


@pytest.mark.parametrize("line", [line for _, line in SEEDS], ids=[c for c, _ in SEEDS])
def test_the_corpus_as_url_and_as_body(client: TestClient, line: bytes) -> None:
    if len(query(line)) < CLIENT_URL_LIMIT:  # longer ones only fit in a body
        check(client.get(f"/v1/check?url={query(line)}"), "GET /v1/check")
        check(client.get(f"/v1/explain?url={query(line)}"), "GET /v1/explain")
        check(client.get(f"/v1/check?{as_text(line)}"), "GET /v1/check, the line as query")
    for path in ("/v1/check", "/v1/seen"):
        check(client.post(path, content=line), f"POST {path} body {line[:60]!r}")
    body = json.dumps({"urls": [as_text(line)], "op": "add"})
    check(client.post("/v1/check", content=body), "POST /v1/check")
    check(client.post("/v1/seen", content=body), "POST /v1/seen")


def test_a_repeated_url_parameter_does_not_hide_a_blocked_url(client: TestClient) -> None:
    response = client.get("/v1/check?url=http://bad.org/&url=http://good.org/")
    assert response.status_code >= 400 or response.json().get("action") == "block", response.text


@FUZZ
@given(
    data=hostile_lines,
    method=st.sampled_from(["GET", "POST"]),
    path=st.sampled_from(["/v1/check", "/v1/explain", "/v1/seen", "/v1/reload", "/healthz"]),
)
def test_any_bytes_anywhere(client: TestClient, data: bytes, method: str, path: str) -> None:
    if len(query(data)) < CLIENT_URL_LIMIT:
        check(client.request(method, f"{path}?url={query(data)}", content=data), method + path)
    check(
        client.request(
            method,
            path,
            content=data,
            headers={"authorization": f"Bearer {query(data)}", "content-type": "application/json"},
        ),
        f"{method} {path}",
    )


@FUZZ
@given(urls=st.lists(blocked_spellings(), min_size=1, max_size=8))
def test_no_spelling_of_a_blocked_url_is_allowed(client: TestClient, urls: list[bytes]) -> None:
    texts = [as_text(u) for u in urls]
    response = client.post("/v1/check", json={"urls": texts})
    check(response, "POST /v1/check")
    for text, result in zip(texts, response.json()["results"], strict=True):
        assert result.get("action") == "block", f"{text!r}: {result}"
    for text in texts:
        response = client.get(f"/v1/check?url={query(text.encode())}")
        assert response.json().get("action") == "block", f"{text!r}: {response.text}"


@FUZZ
@given(method=st.from_regex(r"[A-Z]{3,12}", fullmatch=True))
def test_methods_do_not_become_metric_labels(client: TestClient, method: str) -> None:
    check(client.request(method, "/v1/check"), method)
    assert f'"{method}"' not in client.get("/metrics").text or method in (
        "GET",
        "POST",
        "HEAD",
        "PUT",
        "DELETE",
        "OPTIONS",
        "PATCH",
    ), f"method {method!r} became a metrics label"
