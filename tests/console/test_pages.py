"""The block pages and the console over HTTP (Starlette's TestClient; the browser tests
are in test_browser.py): what every page sends, who may open what, logins, sessions and
anti-forgery tokens, the review queue's actions, languages and the administrator's
templates, and hostile input."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.gateway.test_service_learn import TOKEN as LEARN_TOKEN
from tests.gateway.test_service_learn import app_for
from tests.gateway.test_service_learn import write_config as learn_config
from tests.gateway.test_service_trust import write_config as policy_config
from urlsieve import Filter
from urlsieve.console.auth import hash_password, verify_password
from urlsieve.console.i18n import negotiate
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import load_config
from urlsieve.learn.overlay import build_overlay
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key
from urlsieve.service.app import create_app

PASSWORD = "a password of some length"
HASH = hash_password(PASSWORD)
LOOPBACK = ("127.0.0.1", 40000)
TOKEN = "service-token-0123456789"
INLINE = re.compile(rb"<script(?![^>]*\bsrc=)|\sstyle=|\son[a-z]+=", re.IGNORECASE)


def filter_config(tmp: Path, extra: str = "") -> Path:
    Filter.from_lists([_lists(tmp)]).save(tmp / "base.snap")
    conf = tmp / "gateway.toml"
    conf.write_text(
        '[rules]\nsnapshot = "base.snap"\n'
        f'[service]\ntoken = "{TOKEN}"\n'
        f'[console]\npassword_hash = "{HASH}"\ndecision_log = "decisions.jsonl"\n' + extra,
        encoding="utf-8",
    )
    return conf


def _lists(tmp: Path) -> Path:
    lists = tmp / "lists"
    (lists / "malware").mkdir(parents=True, exist_ok=True)
    (lists / "malware" / "domains").write_text("evil.test\n", encoding="utf-8")
    return lists


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    config = load_config(str(filter_config(tmp_path)), env={})
    with TestClient(create_app(config), base_url="http://127.0.0.1", client=LOOPBACK) as c:
        yield c


def console_of(client: TestClient) -> Any:
    return client.app.state.urlsieve.console  # type: ignore[attr-defined]


def login_token(client: TestClient) -> str:
    page = client.get("/console/login")
    assert page.status_code == 200, page.text
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def login(client: TestClient, password: str = PASSWORD) -> Any:
    return client.post(
        "/console/login",
        data={"csrf": login_token(client), "password": password},
        follow_redirects=False,
    )


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def assert_safe_page(response: Any) -> None:
    csp = response.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"
    assert INLINE.search(response.content) is None, "inline script or style in the page"


# -- what every page sends ---------------------------------------------------------------


def test_every_page_sends_the_policy_and_no_inline_script(client: TestClient) -> None:
    pages = [client.get("/block", params={"url": "http://evil.test/x"})]
    pages.append(client.get("/block", params={"url": "http://fine.test/"}))
    pages.append(client.get("/block", params={"url": "http://[bad"}))
    pages.append(client.get("/console/login"))
    assert login(client).status_code == 303
    for path in (
        "/console/",
        "/console/explain?url=http://evil.test/",
        "/console/review",
        "/console/policy",
    ):
        pages.append(client.get(path))
    for page in pages:
        assert_safe_page(page)
    # The console's one script and stylesheet are the service's own files.
    js = client.get("/static/urlsieve/live.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert client.get("/static/urlsieve/../web.py").status_code == 404


def test_the_block_page_says_what_the_gateway_decided_not_what_the_link_says(
    client: TestClient,
) -> None:
    page = client.get("/block", params={"url": "http://evil.test/x", "category": "porn"})
    assert page.status_code == 200
    assert 'id="category">malware<' in page.text
    assert "lists/malware/domains:1" in page.text
    assert "porn" not in page.text
    # A link naming an allowed URL with a category gets no block page.
    page = client.get("/block", params={"url": "http://fine.test/", "category": "porn"})
    assert "not blocked for you now" in page.text and "porn" not in page.text
    # The redirect's client= is not believed (and not refused: Squid's templates send it).
    page = client.get("/block", params={"url": "http://evil.test/", "client": "10.9.9.9"})
    assert page.status_code == 200


def test_the_block_page_escapes_the_url(client: TestClient) -> None:
    url = 'http://evil.test/"><script>alert(1)</script>'
    page = client.get("/block", params={"url": url})
    assert page.status_code == 200
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


def test_the_block_page_is_in_the_clients_language(client: TestClient) -> None:
    de = client.get(
        "/block",
        params={"url": "http://evil.test/"},
        headers={"accept-language": "fr-CH, de;q=0.8, en;q=0.5"},
    )
    assert '<html lang="de">' in de.text and "Diese Seite ist gesperrt" in de.text
    assert "gesperrt durch die Liste malware" in de.text
    en = client.get(
        "/block", params={"url": "http://evil.test/"}, headers={"accept-language": "fr"}
    )
    assert "This site is blocked" in en.text


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "en"),
        ("de", "de"),
        ("de-AT", "de"),
        ("en-GB,de;q=0.9", "en"),
        ("fr;q=0.9, de;q=0.1", "de"),
        ("de;q=0", "en"),
        ("de;q=nan", "en"),
        ("*", "en"),
        ("," * 5000, "en"),
    ],
)
def test_language_negotiation(header: str | None, expected: str) -> None:
    assert negotiate(header, {"de"}) == expected


def test_an_administrator_overrides_templates_and_adds_a_language(tmp_path: Path) -> None:
    templates = tmp_path / "templates"
    (templates / "locale").mkdir(parents=True)
    (templates / "block.html").write_text(
        '{% extends "page.html" %}{% block main %}<h1>{{ _("This site is blocked") }}</h1>'
        "<p id=school>Ask the library: {{ url }}</p>{% endblock %}",
        encoding="utf-8",
    )
    (templates / "locale" / "fr.json").write_text(
        '{"This site is blocked": "Ce site est bloqué"}', encoding="utf-8"
    )
    conf = filter_config(tmp_path, f'templates = "{templates}"\n')
    with TestClient(create_app(load_config(str(conf), env={})), client=LOOPBACK) as c:
        page = c.get(
            "/block", params={"url": "http://evil.test/<b>"}, headers={"accept-language": "fr"}
        )
    assert "Ce site est bloqué" in page.text
    assert "Ask the library: http://evil.test/&lt;b&gt;" in page.text  # autoescaped still


# -- the console: who may open it, login, sessions, forms ---------------------------------


def test_the_console_answers_loopback_only(tmp_path: Path) -> None:
    config = load_config(str(filter_config(tmp_path)), env={})
    app = create_app(config)
    with TestClient(app, client=("10.0.0.9", 5000)) as far:
        assert far.get("/console/login").status_code == 403
        # A header naming loopback does not make a far client near.
        r = far.get("/console/login", headers={"x-forwarded-for": "127.0.0.1"})
        assert r.status_code == 403
        # The block pages are for everyone.
        assert far.get("/block", params={"url": "http://evil.test/"}).status_code == 200


def test_login_sets_a_strict_httponly_session_cookie(client: TestClient) -> None:
    assert client.get("/console/", follow_redirects=False).headers["location"] == ("/console/login")
    r = login(client)
    assert r.status_code == 303 and r.headers["location"] == "/console/"
    cookie = next(c for c in r.headers.get_list("set-cookie") if "urlsieve_console=" in c)
    flags = cookie.lower()
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert "secure" not in flags  # plain HTTP here; behind TLS it is Secure (next test)
    assert client.get("/console/").status_code == 200


def test_the_cookie_is_secure_behind_tls(tmp_path: Path) -> None:
    config = load_config(str(filter_config(tmp_path)), env={})
    with TestClient(create_app(config), base_url="https://127.0.0.1", client=LOOPBACK) as c:
        r = login(c)
    cookie = next(x for x in r.headers.get_list("set-cookie") if "urlsieve_console=" in x)
    assert "secure" in cookie.lower()


def test_behind_a_tls_terminating_proxy_the_cookie_is_secure_when_configured(
    tmp_path: Path,
) -> None:
    """The proxy speaks TLS to the browser and http to the service: the scheme says http,
    so ``console.secure_cookies`` is how the administrator says the cookie needs ``Secure``
    (the environment too); a value that is not a boolean is refused with the key."""
    conf = filter_config(tmp_path, "secure_cookies = true\n")
    for config in (
        load_config(str(conf), env={}),
        load_config(str(filter_config(tmp_path)), env={"URLSIEVE_CONSOLE_SECURE_COOKIES": "yes"}),
    ):
        with TestClient(create_app(config), base_url="http://127.0.0.1", client=LOOPBACK) as c:
            r = c.get("/console/login")
            # (the test client, like a browser, then keeps a Secure cookie off plain http)
        cookie = next(x for x in r.headers.get_list("set-cookie") if "urlsieve_login=" in x)
        assert "secure" in cookie.lower()
    with pytest.raises(ConfigError, match="secure_cookies must be true or false"):
        load_config(str(filter_config(tmp_path, 'secure_cookies = "maybe"\n')), env={})


def test_the_service_token_logs_in_too(client: TestClient) -> None:
    assert login(client, TOKEN).status_code == 303


@pytest.mark.parametrize("password", ["wrong", "", PASSWORD + " ", "é" * 2000])
def test_a_wrong_password_is_refused(client: TestClient, password: str) -> None:
    r = login(client, password)
    assert r.status_code == 401 and "Wrong password" in r.text
    assert client.get("/console/", follow_redirects=False).status_code == 303


def test_a_login_without_the_forms_token_is_refused(client: TestClient) -> None:
    login_token(client)
    r = client.post("/console/login", data={"password": PASSWORD}, follow_redirects=False)
    assert r.status_code == 403
    r = client.post(
        "/console/login", data={"csrf": "x", "password": PASSWORD}, follow_redirects=False
    )
    assert r.status_code == 403


def test_login_attempts_are_rate_limited(client: TestClient) -> None:
    for _ in range(5):
        assert login(client, "wrong").status_code == 401
    r = login(client)  # the right password, too late
    assert r.status_code == 429 and "Too many login attempts" in r.text


def test_a_session_expires(client: TestClient) -> None:
    now = [1_000_000.0]
    console_of(client).sessions._clock = lambda: now[0]
    assert login(client).status_code == 303
    assert client.get("/console/review").status_code == 200
    now[0] += 30 * 60 - 1
    assert client.get("/console/review").status_code == 200
    now[0] += 31 * 60  # past the 60 minutes
    r = client.get("/console/review", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/login"
    assert client.get("/console/events").status_code == 401


def test_logout_needs_the_token_and_ends_the_session(client: TestClient) -> None:
    login(client)
    page = client.get("/console/").text
    r = client.post("/console/logout", data={"csrf": "forged"}, follow_redirects=False)
    assert r.status_code == 403
    assert client.get("/console/").status_code == 200
    r = client.post("/console/logout", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/console/", follow_redirects=False).status_code == 303


# -- the review queue ----------------------------------------------------------------------


@pytest.fixture
def learning(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    conf = learn_config(tmp_path, check_seconds=0.1)
    conf.write_text(
        conf.read_text("utf-8") + f'[console]\npassword_hash = "{HASH}"\n', encoding="utf-8"
    )
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    with VerdictStore(state / "verdicts.db") as store:
        store.put(
            [
                Learned(
                    *rule_key("http://casino.test/"),
                    "block",
                    "gambling",
                    "learned",
                    score=80,
                    evidence=(("jackpot", 40, 2),),
                ),
                Learned(*rule_key("http://quiz.test/"), "allow", "clean", "learned"),
            ]
        )
        build_overlay(store, state / "learned", state / "learned.snap", promote_after=0)
    config, admin = app_for(conf)
    try:
        with TestClient(create_app(config, learn=admin), client=LOOPBACK) as c:
            c.post("/v1/reload", headers={"authorization": f"Bearer {LEARN_TOKEN}"})
            yield c, conf
    finally:
        admin.close()


def verdict_of(client: TestClient, url: str) -> tuple[str, str | None]:
    got = client.get("/v1/check", params={"url": url}).json()
    return got["action"], got["category"]


def act(client: TestClient, **fields: str) -> Any:
    csrf = csrf_of(client.get("/console/review").text)
    return client.post("/console/review", data={"csrf": csrf, **fields}, follow_redirects=False)


def test_approve_override_and_forget_take_effect_at_once(
    learning: tuple[TestClient, Path],
) -> None:
    client, _conf = learning
    assert login(client).status_code == 303
    page = client.get("/console/review").text
    assert "casino.test/" in page and "jackpot" in page
    assert verdict_of(client, "http://casino.test/") == ("block", "gambling")
    # Approve: the learned verdict becomes an override (it survives re-learning).
    r = act(client, do="approve", url="http://casino.test/", was="block", category="gambling")
    assert r.status_code == 303
    assert "now answers block" in client.get("/console/review").text
    shown = client.get(
        "/v1/learn/verdict",
        params={"url": "http://casino.test/"},
        headers={"authorization": f"Bearer {LEARN_TOKEN}"},
    ).json()
    assert (shown["source"], shown["action"], shown["category"]) == (
        "override",
        "block",
        "gambling",
    )
    # Override: flipped, enforced before the answer came back.
    act(client, do="override", url="http://casino.test/", was="block", category="gambling")
    assert verdict_of(client, "http://casino.test/")[0] == "allow"
    act(client, do="override", url="http://quiz.test/", was="allow", category="clean")
    assert verdict_of(client, "http://quiz.test/") == ("block", "blocked")
    # Forget: nothing decides it any more.
    act(client, do="forget", url="http://casino.test/")
    assert verdict_of(client, "http://casino.test/") == ("none", None)


def test_a_review_request_from_the_block_page(learning: tuple[TestClient, Path]) -> None:
    client, _conf = learning
    page = client.get("/block", params={"url": "http://casino.test/"})
    assert "learned: the page" in page.text and "jackpot" in page.text
    token = re.search(r'name="token" value="([^"]+)"', page.text)
    assert token is not None
    form = {"url": "http://casino.test/", "token": token.group(1), "note": "<b>chess</b>"}
    # Another site's page cannot post it.
    r = client.post("/block/review", data=form, headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    # Nor can a token for another URL be reused.
    r = client.post("/block/review", data={**form, "url": "http://other.test/"})
    assert r.status_code == 403
    r = client.post("/block/review", data=form)
    assert r.status_code == 200 and "Thank you" in r.text
    assert login(client).status_code == 303
    page = client.get("/console/review").text
    assert "&lt;b&gt;chess&lt;/b&gt;" in page
    request_id = re.search(r'name="request" value="(\d+)"', page)
    assert request_id is not None
    act(client, do="allow", url="http://casino.test/", request=request_id.group(1))
    assert verdict_of(client, "http://casino.test/")[0] == "allow"
    assert 'id="no-requests"' in client.get("/console/review").text


def test_review_requests_are_rate_limited_per_client(learning: tuple[TestClient, Path]) -> None:
    client, _conf = learning
    page = client.get("/block", params={"url": "http://casino.test/"}).text
    token = re.search(r'name="token" value="([^"]+)"', page)
    assert token is not None
    form = {"url": "http://casino.test/", "token": token.group(1)}
    statuses = [client.post("/block/review", data=form).status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2


def test_a_forged_review_action_changes_nothing(learning: tuple[TestClient, Path]) -> None:
    client, _conf = learning
    assert login(client).status_code == 303
    fields = {"do": "forget", "url": "http://casino.test/"}
    assert client.post("/console/review", data=fields).status_code == 403
    r = client.post("/console/review", data={**fields, "csrf": "forged"})
    assert r.status_code == 403
    csrf = csrf_of(client.get("/console/review").text)
    r = client.post(
        "/console/review", data={**fields, "csrf": csrf}, headers={"sec-fetch-site": "cross-site"}
    )
    assert r.status_code == 403
    assert verdict_of(client, "http://casino.test/") == ("block", "gambling")


# -- a policy: groups, warnings, time --------------------------------------------------------


@pytest.fixture
def policed(tmp_path: Path) -> Iterator[TestClient]:
    conf = policy_config(
        tmp_path,
        8399,
        '["127.0.0.0/8"]',
        f'token = "{TOKEN}"\n[console]\npassword_hash = "{HASH}"\n',
    )
    with TestClient(create_app(load_config(str(conf), env={})), client=LOOPBACK) as c:
        yield c


def test_a_policys_block_page_names_the_group(policed: TestClient) -> None:
    page = policed.get("/block", params={"url": "http://games.example/"})
    assert 'id="group">pupils<' in page.text and 'id="category">games<' in page.text


def test_a_warning_is_in_the_family_and_continues(policed: TestClient) -> None:
    page = policed.get(
        "/block", params={"url": "http://social.example/x"}, headers={"accept-language": "de"}
    )
    assert page.status_code == 200 and "Weiter zur Seite" in page.text
    assert_safe_page(page)
    token = re.search(r'name="token" value="([^"]+)"', page.text)
    assert token is not None
    r = policed.post(
        "/v1/continue",
        data={"url": "http://social.example/x", "token": token.group(1)},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "http://social.example/x"
    # The service's own confirmation page is the same template.
    page = policed.get("/v1/continue", params={"url": "http://chat.example/"})
    assert 'id="continue"' in page.text


def test_explain_for_another_client_and_time(policed: TestClient) -> None:
    assert login(policed).status_code == 303
    pupil = policed.get("/console/explain", params={"url": "http://games.example/"}).text
    assert 'id="decision">block<' in pupil
    staff = policed.get(
        "/console/explain",
        params={"url": "http://games.example/", "client": "10.9.9.9", "at": "2026-05-01T10:00"},
    ).text
    assert 'id="decision">pass<' in staff and "source: staff" in staff
    assert "2026-05-01 10:00" in staff
    bad = policed.get("/console/explain", params={"url": "http://x/", "at": "noon"}).text
    assert 'id="error"' in bad
    policy = policed.get("/console/policy").text
    assert "pupils" in policy and "staff" in policy


# -- hostile input ------------------------------------------------------------------------


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.binary(max_size=300), body=st.binary(max_size=300))
def test_hostile_bytes_never_get_a_5xx(tmp_path: Path, query: bytes, body: bytes) -> None:
    app = _hostile_app(tmp_path)
    with TestClient(app, client=LOOPBACK, raise_server_exceptions=False) as c:
        for method, path in (
            ("GET", "/block"),
            ("POST", "/block/review"),
            ("POST", "/console/login"),
            ("GET", "/console/explain"),
            ("GET", "/console/"),
            ("POST", "/console/review"),
            ("GET", "/console/events"),
        ):
            target = path + "?" + quote_from_bytes(query, safe="=&%+")
            r = c.request(
                method,
                target,
                content=body,
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
            assert r.status_code < 500, (method, target, r.status_code, r.text[:300])


_APPS: dict[str, Any] = {}


def _hostile_app(tmp_path: Path) -> Any:
    key = "app"
    if key not in _APPS:
        _APPS[key] = create_app(load_config(str(filter_config(tmp_path)), env={}))
    return _APPS[key]


def test_password_hashes() -> None:
    assert verify_password(HASH, PASSWORD)
    assert not verify_password(HASH, PASSWORD + "x")
    assert not verify_password("scrypt$1$1$1$x$y", PASSWORD)
    assert not verify_password("plain", PASSWORD)
    assert hash_password(PASSWORD) != HASH  # salted


def test_a_bad_password_hash_is_a_config_error(tmp_path: Path) -> None:
    from urlsieve.exceptions import ConfigError

    conf = filter_config(tmp_path)
    conf.write_text(conf.read_text("utf-8").replace(HASH, "sha1$abc"), encoding="utf-8")
    with pytest.raises(ConfigError, match="hash-password"):
        load_config(str(conf), env={})


def test_the_learning_gateways_pending_page(tmp_path: Path) -> None:
    conf = learn_config(tmp_path)
    conf.write_text(
        conf.read_text("utf-8").replace('unknown = "allow"', 'unknown = "block"'), "utf-8"
    )
    config, admin = app_for(conf)
    try:
        with TestClient(create_app(config, learn=admin), client=LOOPBACK) as c:
            page = c.get(
                "/block",
                params={"url": "http://brand-new.test/"},
                headers={"accept-language": "de"},
            )
            assert page.status_code == 200 and "Diese Seite wird geprüft" in page.text
            assert_safe_page(page)
            # The administrator's lists still give the block page.
            page = c.get("/block", params={"url": "http://evil.com/"})
            assert "This site is blocked" in page.text
    finally:
        admin.close()


def test_the_service_restarts_with_its_review_store(tmp_path: Path) -> None:
    conf = filter_config(tmp_path, f'reviews = "{tmp_path / "reviews.db"}"\n')
    app = create_app(load_config(str(conf), env={}))
    for _ in range(2):  # the lifespan twice: the store is opened again
        with TestClient(app, client=LOOPBACK) as c:
            page = c.get("/block", params={"url": "http://evil.test/"}).text
            token = re.search(r'name="token" value="([^"]+)"', page)
            assert token is not None
            r = c.post("/block/review", data={"url": "http://evil.test/", "token": token.group(1)})
            assert r.status_code == 200
    assert console_of(c).reviews.count_open() == 2


def test_the_cli_makes_a_hash_the_console_accepts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import io

    from urlsieve.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("a new console password\n"))
    assert main(["console", "hash-password"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith('password_hash = "scrypt$')
    stored = line.split('"')[1]
    assert verify_password(stored, "a new console password")
    conf = filter_config(tmp_path)
    conf.write_text(conf.read_text("utf-8").replace(HASH, stored), encoding="utf-8")
    with TestClient(create_app(load_config(str(conf), env={})), client=LOOPBACK) as c:
        assert login(c, "a new console password").status_code == 303
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["console", "hash-password"]) == 2
