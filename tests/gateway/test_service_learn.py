"""The service's review and override endpoints (``/v1/learn/*``): token-protected, off
without a learner or a token, every write rebuilding the overlay that the service then
enforces, overrides surviving re-learning, and hostile bodies answered 4xx, never 5xx.

In-process (Starlette TestClient) with real files: a base snapshot, the learner's
verdict store and overlay in ``tmp_path``, wired as ``urlsieve serve`` wires them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from urlsieve import Filter
from urlsieve.cli import main
from urlsieve.config import learn_admin, read_config
from urlsieve.gateway.config import GatewayConfig, load_config
from urlsieve.gateway.learning import LearnReview
from urlsieve.learn.overlay import build_overlay
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key
from urlsieve.service.app import MAX_LEARN_PAGE, create_app

TOKEN = "learn-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

READS = [("GET", "/v1/learn/verdicts"), ("GET", "/v1/learn/verdict")]
WRITES = [("POST", "/v1/learn/allow"), ("POST", "/v1/learn/block"), ("POST", "/v1/learn/forget")]
ENDPOINTS = READS + WRITES


def write_config(
    tmp: Path, *, token: bool = True, check_seconds: float = 3600, learner: bool = True
) -> Path:
    """A gateway config: a base snapshot (evil.com blocked, good.org/x allowed), a token,
    and the [learn] section (with the learner's directory unless ``learner`` is off)."""
    base = tmp / "base.snap"
    if not base.exists():
        Filter.from_rules(["evil.com", "@@good.org/x"]).save(base)
    conf = tmp / "gateway.toml"
    conf.write_text(
        '[rules]\nsnapshot = "base.snap"\n'
        f"[squid]\nreload_check_seconds = {check_seconds}\n"
        + (f'[service]\ntoken = "{TOKEN}"\n' if token else "")
        + '[learn]\nqueue = "sqlite:state/queue.db"\noverlay = "state/learned.snap"\n'
        'unknown = "allow"\n' + ('directory = "state"\n' if learner else ""),
        encoding="utf-8",
    )
    return conf


def logged() -> tuple[list[str], Any]:
    lines: list[str] = []
    return lines, lines.append


def app_for(conf: Path) -> tuple[GatewayConfig, LearnReview]:
    whole = read_config(str(conf), env={})
    config = whole.gateway
    admin = learn_admin(whole, logged()[1])
    assert admin is not None
    return config, admin


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, LearnReview, Path]]:
    conf = write_config(tmp_path)
    config, admin = app_for(conf)
    try:
        with TestClient(create_app(config, learn=admin)) as client:
            yield client, admin, conf
    finally:
        admin.close()


@pytest.fixture
def client(served: tuple[TestClient, LearnReview, Path]) -> TestClient:
    return served[0]


def call(client: TestClient, method: str, path: str, **kw: Any) -> Any:
    if method == "GET":
        return client.get(path, params={"url": "http://x.test/"}, **kw)
    return client.post(path, json={"url": "http://x.test/"}, **kw)


def check(client: TestClient, url: str) -> tuple[str, str | None]:
    got = client.get("/v1/check", params={"url": url}).json()
    return got["action"], got["category"]


# -- the token, and the endpoints being off -------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer wrong-token",
        f"Basic {TOKEN}",
        "Bearer",
        f"bearer  {TOKEN}x",
        "Bearer é".encode("latin-1"),
    ],
)
def test_every_learn_endpoint_needs_the_token(
    client: TestClient, method: str, path: str, header: str | bytes | None
) -> None:
    headers = {} if header is None else {"Authorization": header}
    r = call(client, method, path, headers=headers)
    assert r.status_code == 401, r.text
    assert r.json()["error"] == "unauthorized" and r.json()["detail"]


def test_an_unauthorised_write_changes_nothing(
    served: tuple[TestClient, LearnReview, Path],
) -> None:
    client, admin, _conf = served
    r = client.post(
        "/v1/learn/block", json={"url": "http://nope.test/"}, headers={"Authorization": "x"}
    )
    assert r.status_code == 401
    assert admin.show("http://nope.test/") is None
    # The body of an unauthorised caller is not even parsed.
    r = client.post("/v1/learn/block", content=b"\xff{not json")
    assert (r.status_code, r.json()["error"]) == (401, "unauthorized")


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_the_endpoints_are_off_without_a_learner_or_a_token(
    tmp_path: Path, method: str, path: str
) -> None:
    # No learner wired (no [learn] directory): 404, whatever the token.
    conf = write_config(tmp_path, learner=False)
    config = load_config(str(conf), env={})
    lines, log = logged()
    assert learn_admin(read_config(str(conf), env={}), log) is None
    assert "learn.directory is required" in " ".join(lines)
    with TestClient(create_app(config)) as client:
        r = call(client, method, path, headers=AUTH)
        assert (r.status_code, r.json()["error"]) == (404, "learn_disabled")
        assert "/v1/learn/verdicts" not in client.get("/openapi.json").json()["paths"]
    # A learner but no token configured: off too (never open to anyone).
    conf = write_config(tmp_path, token=False)
    config = load_config(str(conf), env={})
    lines, log = logged()
    assert learn_admin(read_config(str(conf), env={}), log) is None
    assert "service.token" in " ".join(lines)
    config_with_learn = read_config(str(write_config(tmp_path)), env={})
    admin = learn_admin(config_with_learn, log)
    assert admin is not None
    try:
        with TestClient(create_app(config, learn=admin)) as client:
            for headers in ({}, AUTH):
                r = call(client, method, path, headers=headers)
                assert (r.status_code, r.json()["error"]) == (404, "learn_disabled")
    finally:
        admin.close()


def test_serve_wires_nothing_without_a_learn_section(tmp_path: Path) -> None:
    (tmp_path / "rules.txt").write_text("evil.com\n", encoding="utf-8")
    conf = tmp_path / "plain.toml"
    conf.write_text(f'[rules]\nlists = ["rules.txt"]\n[service]\ntoken = "{TOKEN}"\n')
    lines, log = logged()
    assert learn_admin(read_config(str(conf), env={}), log) is None
    assert lines == []  # silently: nothing asked for
    no_file = read_config(
        None, env={}, overrides={"token": TOKEN, "lists": [str(tmp_path / "rules.txt")]}
    )
    assert learn_admin(no_file, log) is None


# -- writes: enforced by this service at once -----------------------------------------


def test_block_is_enforced_by_check_when_it_answers(client: TestClient) -> None:
    assert check(client, "http://unknown.test/page") == ("none", None)
    r = client.post(
        "/v1/learn/block",
        json={"url": "http://unknown.test/page", "category": "cheat", "note": "seen it"},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["key"], body["action"], body["category"], body["source"], body["note"]) == (
        "unknown.test/page",
        "block",
        "cheat",
        "override",
        "seen it",
    )
    assert body["overlay_rules"] == 1 and "warning" not in body
    assert (body["gateway"]["action"], body["gateway"]["category"]) == ("block", "cheat")
    assert check(client, "http://unknown.test/page") == ("block", "cheat")
    assert check(client, "http://unknown.test/other") == ("none", None)  # that page only


def test_block_a_whole_host_with_the_default_category(client: TestClient) -> None:
    r = client.post("/v1/learn/block", json={"url": "whole.test"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert (r.json()["key"], r.json()["is_host"], r.json()["category"]) == (
        "whole.test",
        True,
        "blocked",
    )
    assert check(client, "http://www.whole.test/any/page") == ("block", "blocked")


def test_allow_overrides_a_learned_block(served: tuple[TestClient, LearnReview, Path]) -> None:
    client, _admin, conf = served
    state = conf.parent / "state"
    with VerdictStore(state / "verdicts.db") as store:  # what the learner wrote
        key, host = rule_key("http://casino.test/")
        store.put([Learned(key, host, "block", "gambling", "learned", score=90)])
        build_overlay(store, state / "learned", state / "learned.snap", promote_after=0)
    client.post("/v1/reload", headers=AUTH)
    assert check(client, "http://casino.test/") == ("block", "gambling")
    r = client.post(
        "/v1/learn/allow", json={"url": "http://casino.test/", "note": "ours"}, headers=AUTH
    )
    assert r.status_code == 200, r.text
    assert (r.json()["action"], r.json()["category"], r.json()["source"]) == (
        "allow",
        "override",
        "override",
    )
    assert check(client, "http://casino.test/")[0] == "allow"
    # The CLI sees what the service wrote: one store, one implementation.
    assert main(["learn", "--config", str(conf), "list", "--source", "override"]) == 0


def test_the_administrators_lists_win_and_the_answer_says_so(client: TestClient) -> None:
    r = client.post("/v1/learn/allow", json={"url": "http://evil.com/x"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["gateway"]["action"] == "block"
    assert "administrator's lists win" in r.json()["warning"]
    assert check(client, "http://evil.com/x")[0] == "block"


def test_forget_drops_the_override(client: TestClient) -> None:
    client.post("/v1/learn/block", json={"url": "http://gone.test/a"}, headers=AUTH)
    assert check(client, "http://gone.test/a")[0] == "block"
    r = client.post("/v1/learn/forget", json={"url": "http://GONE.test:80/a"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["forgotten"] is True
    assert check(client, "http://gone.test/a") == ("none", None)
    r = client.post("/v1/learn/forget", json={"url": "http://gone.test/a"}, headers=AUTH)
    assert (r.status_code, r.json()["forgotten"]) == (200, False)
    r = client.get("/v1/learn/verdict", params={"url": "http://gone.test/a"}, headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (404, "not_learned")


def test_an_override_survives_relearning_and_the_reloader_picks_up_the_overlay(
    tmp_path: Path,
) -> None:
    """The learner (another process: its own store connection, its own overlay rebuild)
    learns the page clean after the operator blocked it: the override stays, and the
    service's reloader loads the learner's overlay without being asked."""
    conf = write_config(tmp_path, check_seconds=0.1)
    config, admin = app_for(conf)
    state = tmp_path / "state"
    url = "http://relearn.test/p?b=2&a=1"
    try:
        with TestClient(create_app(config, learn=admin)) as client:
            r = client.post("/v1/learn/block", json={"url": url, "category": "x"}, headers=AUTH)
            assert r.status_code == 200, r.text
            key = r.json()["key"]
            assert key == "relearn.test/p?a=1&b=2"
            generation = client.get("/healthz").json()["rules"]["generation"]
            with VerdictStore(state / "verdicts.db") as store:
                store.put(
                    [
                        Learned(key, "relearn.test", "allow", "clean", "learned", url=url),
                        Learned("other.test/q", "other.test", "block", "porn", "learned"),
                    ]
                )
                build_overlay(store, state / "learned", state / "learned.snap", promote_after=0)
            deadline = time.monotonic() + 30  # generous: the reloader checks every 0.1 s
            while client.get("/healthz").json()["rules"]["generation"] == generation:
                assert time.monotonic() < deadline, "the reloader never loaded the overlay"
                time.sleep(0.05)
            assert check(client, "http://other.test/q") == ("block", "porn")
            assert check(client, "http://relearn.test/p?a=1&b=2&utm_source=z") == ("block", "x")
            shown = client.get("/v1/learn/verdict", params={"url": url}, headers=AUTH).json()
            assert (shown["source"], shown["action"], shown["category"]) == (
                "override",
                "block",
                "x",
            )
    finally:
        admin.close()


# -- reads -----------------------------------------------------------------------------


def test_show_a_verdict_its_host_and_nothing(
    served: tuple[TestClient, LearnReview, Path],
) -> None:
    client, _admin, conf = served
    with VerdictStore(conf.parent / "state" / "verdicts.db") as store:
        store.put(
            [
                Learned(
                    "dirty.test/a",
                    "dirty.test",
                    "block",
                    "adult",
                    "learned",
                    score=70,
                    evidence=(("bad word", 20, 3),),
                    url="http://dirty.test/a",
                    content_hash="ab" * 32,
                    fetched_at=1.7e9,
                )
            ]
        )
    r = client.get("/v1/learn/verdict", params={"url": "http://DIRTY.test/a"}, headers=AUTH)
    assert r.status_code == 200, r.text
    shown = r.json()
    assert (shown["key"], shown["score"], shown["source"]) == ("dirty.test/a", 70, "learned")
    assert shown["evidence"] == [{"phrase": "bad word", "weight": 20, "count": 3}]
    client.post("/v1/learn/block", json={"url": "host.test"}, headers=AUTH)
    r = client.get("/v1/learn/verdict", params={"url": "http://host.test/deep/x"}, headers=AUTH)
    assert (r.status_code, r.json()["key"]) == (200, "host.test")  # the host's rule
    r = client.get("/v1/learn/verdict", params={"url": "http://never.test/"}, headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (404, "not_learned")


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("", 400, "missing_url"),
        ("url=a&url=b", 400, "repeated_url"),
        ("url=%FF", 400, "invalid_query"),
        ("url=http%3A%2F%2F", 422, "invalid_url"),
        ("url=http://a.test/%00", 422, "invalid_url"),  # ?url= is percent-decoded: a NUL
        ("url=http://a.test/%2500", 404, "not_learned"),  # the URL's own escape: fine
        ("url=" + "a" * 9000, 422, "invalid_url"),
        ("url=http://a.test/%C2%85", 422, "invalid_url"),  # a C1 control
    ],
)
def test_show_refuses_bad_urls(client: TestClient, query: str, status: int, error: str) -> None:
    r = client.get(f"/v1/learn/verdict?{query}", headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text


def test_list_pages_and_filters(client: TestClient) -> None:
    for n in range(5):
        r = client.post("/v1/learn/block", json={"url": f"http://h{n}.test/p"}, headers=AUTH)
        assert r.status_code == 200
    client.post("/v1/learn/allow", json={"url": "http://ok.test/"}, headers=AUTH)
    r = client.get("/v1/learn/verdicts", headers=AUTH)
    assert r.status_code == 200
    page = r.json()
    assert len(page["verdicts"]) == 6 and page["next_offset"] is None
    assert page["limit"] == 100 and page["offset"] == 0
    keys = []
    offset: int | None = 0
    while offset is not None:
        got = client.get(
            "/v1/learn/verdicts", params={"limit": 2, "offset": offset}, headers=AUTH
        ).json()
        assert len(got["verdicts"]) <= 2
        keys += [v["key"] for v in got["verdicts"]]
        offset = got["next_offset"]
    assert keys == [v["key"] for v in page["verdicts"]]
    blocked = client.get("/v1/learn/verdicts", params={"action": "block"}, headers=AUTH).json()
    assert {v["key"] for v in blocked["verdicts"]} == {f"h{n}.test/p" for n in range(5)}
    learned = client.get("/v1/learn/verdicts", params={"source": "learned"}, headers=AUTH).json()
    assert learned["verdicts"] == []
    past = client.get("/v1/learn/verdicts", params={"offset": 1000}, headers=AUTH).json()
    assert past["verdicts"] == [] and past["next_offset"] is None


@pytest.mark.parametrize(
    "query",
    [
        "limit=abc",
        "limit=0",  # a page of nothing would never move on
        f"limit={MAX_LEARN_PAGE + 1}",
        "limit=-1",
        "limit=1e3",
        "limit=" + "9" * 400,
        "offset=-5",
        "offset=99999999999",
        "source=bogus",
        "action=deny",
        "action=block&action=allow",
        "source=%FF",
    ],
)
def test_list_refuses_bad_parameters(client: TestClient, query: str) -> None:
    r = client.get(f"/v1/learn/verdicts?{query}", headers=AUTH)
    assert r.status_code == 400, r.text
    assert r.json()["error"] in ("invalid_query", "repeated_field") and r.json()["detail"]


# -- bad and hostile bodies -----------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        ("block", b"[1]", 400, "invalid_body", "JSON object"),
        ("block", b"{", 400, "invalid_json", "not JSON"),
        ("block", b'{"url": "a", "url": "b"}', 400, "invalid_json", "twice"),
        ("block", b"{}", 400, "invalid_body", '"url"'),
        ("block", b'{"url": 5}', 400, "invalid_body", "string"),
        ("block", b'{"url": null}', 400, "invalid_body", "string"),
        ("block", b'{"url": ["http://a.test/"]}', 400, "invalid_body", "string"),
        ("block", b'{"url": "http://a.test/", "catgory": "x"}', 400, "invalid_body", "catgory"),
        ("allow", b'{"url": "http://a.test/", "category": "x"}', 400, "invalid_body", "category"),
        ("forget", b'{"url": "http://a.test/", "note": "x"}', 400, "invalid_body", "note"),
        ("block", b'{"url": "http://a.test/", "note": 1}', 400, "invalid_body", "note"),
        ("block", b'{"url": "com"}', 422, "invalid_override", "top-level domain"),
        ("block", b'{"url": "http://com/"}', 422, "invalid_override", "top-level domain"),
        ("block", b'{"url": ""}', 422, "invalid_url", "empty"),
        ("block", b'{"url": "http://"}', 422, "invalid_url", ""),
        ("block", b'{"url": "http://a.test/\\u0000"}', 422, "invalid_url", "U+0000"),
        ("block", b'{"url": "http://a.test/\\u0085"}', 422, "invalid_url", "U+0085"),
        ("block", b'{"url": "http://a.test/\\udcff"}', 422, "invalid_url", "surrogate"),
        ("forget", b'{"url": "http://a.test/\\ud800"}', 422, "invalid_url", "surrogate"),
        ("block", b'{"url": "http://a.test/", "category": "../x"}', 422, "invalid_override", ""),
        ("block", b'{"url": "http://a.test/", "category": ""}', 422, "invalid_override", ""),
        ("block", b'{"url": "http://a.test/", "category": ".h"}', 422, "invalid_override", ""),
        ("block", b'{"url": "http://a.test/", "category": "a b"}', 422, "invalid_override", ""),
        ("block", b'{"url": "http://a.test/", "category": "a\\tb"}', 422, "invalid_override", ""),
        ("block", b'{"url": "http://a.test/", "note": "x\\ny"}', 422, "invalid_override", "note"),
        ("allow", b"\xff\xfe", 400, "invalid_json", "UTF-8"),
    ],
)
def test_bad_bodies_say_what_is_wrong(
    served: tuple[TestClient, LearnReview, Path], case: tuple[str, bytes, int, str, str]
) -> None:
    path, body, status, error, says = case
    client, admin, _conf = served
    r = client.post(f"/v1/learn/{path}", content=body, headers=AUTH)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert says in r.json()["detail"]
    assert admin.list(None, None, 10, 0) == []  # nothing stored


def test_huge_fields_are_refused(client: TestClient) -> None:
    for field, size in (("url", 8193), ("category", 61), ("note", 1001)):
        body = {"url": "http://a.test/", field: "a" * size}
        if field == "url":
            body["url"] = "http://a.test/" + "a" * size
        r = client.post("/v1/learn/block", json=body, headers=AUTH)
        assert r.status_code == 422, r.text
        assert "at most" in r.json()["detail"] and len(r.json()["detail"]) <= 1000
    r = client.post("/v1/learn/block", json={"url": "http://a.test/" + "a" * 8000}, headers=AUTH)
    assert r.status_code == 200, r.text  # at the cap: fine


_HOSTILE_TEXT = st.one_of(
    st.sampled_from(
        [
            "com",
            "http://",
            "http://a.test/\x00",
            "\udcff",
            "../../etc",
            "a" * 9000,
            "http://[::1]/",
            "http://127.0.0.1/x",
            "http://a.test/?" + "&".join(f"k{i}=v" for i in range(200)),
            "http://xn--/",
            "http://a.test/\u202e",
            "ftp://a.test/x",
            "javascript:alert(1)",
            "a.test|",
            "=a.test/x|",
            "@@a.test",
            "# comment",
            "",
            " ",
        ]
    ),
    st.text(max_size=80),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40),
)
_JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_BODY = st.one_of(
    st.fixed_dictionaries(
        {"url": _JSON_VALUE},
        optional={"category": _JSON_VALUE, "note": _JSON_VALUE, "extra": _JSON_VALUE},
    ).map(lambda d: json.dumps(d, ensure_ascii=True).encode()),
    _JSON_VALUE.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
)


def test_hostile_bodies_never_get_a_5xx(tmp_path: Path) -> None:
    config, admin = app_for(write_config(tmp_path))
    try:
        with TestClient(create_app(config, learn=admin), raise_server_exceptions=False) as client:

            @settings(
                max_examples=150,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            )
            @given(path=st.sampled_from(["allow", "block", "forget"]), body=_BODY)
            def hostile(path: str, body: bytes) -> None:
                r = client.post(f"/v1/learn/{path}", content=body, headers=AUTH)
                assert r.status_code < 500, (r.status_code, r.text)
                if r.status_code >= 400:
                    assert set(r.json()) == {"error", "detail"} and r.json()["detail"]
                # Whatever was accepted, the service still answers and still enforces.
                assert check(client, "http://evil.com/")[0] == "block"

            hostile()
    finally:
        admin.close()


# -- the OpenAPI document -------------------------------------------------------------


def test_the_openapi_document_lists_every_route(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    served: dict[str, set[str]] = {}
    for route in client.app.routes:  # type: ignore[attr-defined]
        methods = {m.lower() for m in (route.methods or ())} - {"head"}
        if route.path != "/openapi.json":
            served.setdefault(route.path, set()).update(methods)
    assert {p: set(ops) for p, ops in doc["paths"].items()} == served
    for path in (p for p in served if p.startswith("/v1/learn/")):
        for op in doc["paths"][path].values():
            assert op["security"] == [{"bearer": []}]
            assert {"401", "404"} <= set(op["responses"])
    schemas = doc["components"]["schemas"]
    for ref in json.dumps(doc).split('"#/components/schemas/')[1:]:
        assert ref.split('"', 1)[0] in schemas


def test_the_gateway_never_imports_the_learner() -> None:
    """The learn endpoints come through a protocol: importing the service (and its
    protocol) loads nothing of :mod:`urlsieve.learn`."""
    code = (
        "import sys, urlsieve.service.app, urlsieve.gateway.learning\n"
        "print(sorted(m for m in sys.modules if m.startswith('urlsieve.learn')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out
