"""``?category``: a warning page instead of a block, and "continue" lets the client through
to that site for a while; grants are shared by processes (SQLite) and by a fleet (a real
Valkey server), expire, and an unreachable store shows the warning again."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.seen.valkey_fixtures import ServerProcess, free_port
from urlsieve import Filter
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import load_config
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import PolicyHelper
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.squid import HelperSettings
from urlsieve.policy.engine import PASS, WARN, PolicyEngine, Who
from urlsieve.policy.model import PolicyError
from urlsieve.policy.native import read_native
from urlsieve.policy.warn import MemoryGrants, SqliteGrants, ValkeyGrants, site_of
from urlsieve.rules.model import BLOCK, parse_rule
from urlsieve.service.app import create_app

POLICY = """
[policy]
warn_store = "{store}"
warn_minutes = 30
warn_page = "http://warn.test/?u=%u&t=%t&a=%a"

[[source]]
name = "kids"
ip = ["10.0.0.0/24"]

[[acl]]
source = "kids"
pass = ["!adult", "?social", "all"]
redirect = "http://block.test/?t=%t"

[[acl]]
source = "default"
pass = ["all"]
"""


def engine(store: str, grants: object = None) -> PolicyEngine:
    policy = read_native(tomllib.loads(POLICY.format(store=store)), "/nowhere/u.toml")
    rules = Filter(
        [
            parse_rule("adult.example", BLOCK, "adult"),
            parse_rule("social.example", BLOCK, "social"),
        ]
    )
    return PolicyEngine(policy, rules, grants=grants)  # type: ignore[arg-type]


KID = Who("10.0.0.7")


def test_warn_then_continue_lets_the_client_through_to_the_site_until_it_expires() -> None:
    now = [1_000_000.0]
    grants = MemoryGrants(clock=lambda: now[0])
    e = engine("memory:", grants)
    first = e.decide("http://www.social.example/feed", KID)
    assert (first.action, first.category, first.target) == (
        WARN,
        "social",
        "http://warn.test/?u=%u&t=%t&a=%a",
    )
    assert e.decide("http://adult.example/", KID).action == "block"  # block stays a block
    site, canonical = e.grant("http://WWW.Social.Example/feed", KID)
    assert (site, canonical) == ("social.example", "http://www.social.example/feed")
    assert e.decide("http://m.social.example/other", KID).action == PASS  # the whole site
    assert e.decide("http://social.example/", Who("10.0.0.8")).action == WARN  # not others
    now[0] += 30 * 60 - 1
    assert e.decide("http://social.example/", KID).action == PASS
    now[0] += 2
    assert e.decide("http://social.example/", KID).action == WARN  # expired


def test_a_user_is_granted_wherever_they_sit() -> None:
    e = engine("memory:", MemoryGrants())
    e.grant("http://social.example/", Who("10.0.0.7", None, "Alice"))
    assert e.decide("http://social.example/", Who("10.0.0.9", None, "ALICE")).action == PASS


def test_helper_children_share_grants_through_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "grants.db"
    children = [engine(f"sqlite:{path}") for _ in range(2)]
    helpers = [
        PolicyHelper(
            LiveRules(lambda e=e: e),
            HelperSettings(mode=HelperMode.REWRITE, redirect_url="http://x.test/", channels=False),
        )
        for e in children
    ]
    line = b"http://social.example/a 10.0.0.7/- - GET"
    for helper in helpers:
        reply = helper.handle_batch([line])[0]
        assert (
            reply
            == 'OK rewrite-url="http://warn.test/?u=http://social.example/a&t=social&a=10.0.0.7"\n'
        )
    children[0].grant("http://social.example/", KID)  # the service, in another process
    for helper in helpers:
        assert helper.handle_batch([line])[0] == "ERR\n"
        assert helper.handle(line) == "ERR\n"
    assert SqliteGrants(str(path)).granted(f"addr:10.0.0.7\x00{site_of('social.example')}")


def test_a_browser_continuing_by_address_covers_its_authenticated_requests() -> None:
    """/v1/continue knows the browser by its address; Squid sends the user too."""
    e = engine("memory:", MemoryGrants())
    e.grant("http://social.example/", Who("::ffff:10.0.0.7"))
    assert e.decide("http://social.example/", Who("10.0.0.7", None, "SCHOOL%5cBob")).action == PASS
    e.grant("http://adult-free.example/", Who("10.0.0.9", None, "SCHOOL%5cBob"))
    # the user's grant, by the name normalised as user lists are
    assert e.grants is not None and e.grants.granted("user:school\\bob\x00adult-free.example")


def test_a_fleet_shares_grants_through_valkey(valkey_server: ServerProcess) -> None:
    a, b = engine(valkey_server.url), engine(valkey_server.url)
    who = Who("10.0.0.42")
    assert b.decide("http://social.example/", who).action == WARN
    a.grant("http://social.example/", who, seconds=60)
    assert b.decide("http://social.example/", who).action == PASS
    assert isinstance(b.grants, ValkeyGrants)


def test_an_unreachable_store_shows_the_warning_again() -> None:
    e = engine(f"valkey://127.0.0.1:{free_port()}/0")
    assert e.decide("http://social.example/", KID).action == WARN
    assert e.grant_errors == 1


def test_warn_needs_a_store_and_a_page() -> None:
    text = POLICY.format(store="memory:").replace('warn_store = "memory:"\n', "")
    with pytest.raises(PolicyError, match="warn_store"):
        read_native(tomllib.loads(text), "/nowhere/u.toml").validate({"adult", "social"})
    with pytest.raises(ConfigError, match="warn_store"):
        read_native(tomllib.loads(POLICY.format(store="ftp://x")), "/x.toml")
        engine("ftp://x")


def test_the_service_continue_endpoint(tmp_path: Path) -> None:
    (tmp_path / "social").write_text("social.example\n")
    (tmp_path / "adult").write_text("adult.example\n")
    config = tmp_path / "urlsieve.toml"
    config.write_text(
        POLICY.format(store=f"sqlite:{tmp_path / 'grants.db'}")
        + '\n[[dest]]\nname = "social"\ndomainlist = "social"\n'
        + '[[dest]]\nname = "adult"\ndomainlist = "adult"\n'
    )
    app = create_app(load_config(str(config), env={}))
    with TestClient(app, client=("10.0.0.7", 1234)) as kid:
        r = kid.get("/v1/check", params={"url": "http://social.example/x"})
        assert r.json()["action"] == "warn"
        r = kid.get(
            "/v1/continue",
            params={"url": "http://social.example/x\r\nSet-Cookie: a=b"},
            follow_redirects=False,
        )
        assert r.status_code == 422 and "set-cookie" not in r.headers  # never a split header
        r = kid.get("/v1/continue", params={"url": "http://evil.test/"}, follow_redirects=False)
        assert r.status_code == 409  # not behind a warning: never an open redirect
        url = "http://social.example:8080/a/../b"
        page = kid.get("/v1/continue", params={"url": url}, follow_redirects=False)
        assert page.status_code == 200  # the confirmation page: nothing granted yet
        r = kid.get("/v1/check", params={"url": "http://social.example/y"})
        assert r.json()["action"] == "warn"
        token = re.search(r'name="token" value="([^"]+)"', page.text)
        assert token is not None
        r = kid.post("/v1/continue", data={"url": url, "token": token[1]}, follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "http://social.example:8080/a/../b"  # as asked
        assert r.headers["x-urlsieve-granted"] == "social.example"
        r = kid.get("/v1/check", params={"url": "http://social.example/y"})
        assert r.json()["action"] == "allow"
        r = kid.get("/v1/continue", params={"url": "javascript:alert(1)"}, follow_redirects=False)
        assert r.status_code == 422


def test_the_external_acl_keeps_a_warning_over_a_later_reading() -> None:
    """In acl mode a %23 may be a raw '#': each reading is decided, and a warning on the one
    as sent is kept (a later reading that passes once won)."""
    policy = read_native(tomllib.loads(POLICY.format(store="memory:")), "/nowhere/u.toml")
    rules = Filter(
        [parse_rule("ok.example/social/", BLOCK, "social"), parse_rule("a.example", BLOCK, "adult")]
    )
    e = PolicyEngine(policy, rules, grants=MemoryGrants())
    helper = PolicyHelper(LiveRules(lambda: e), HelperSettings(mode=HelperMode.ACL, channels=False))
    # As sent: /x%23/../social/y is /social/y (warned); cut at the %23: /x (passes).
    reply = helper.handle(b"http://ok.example/x%23/../social/y 10.0.0.7 - GET")
    assert reply.startswith('OK tag="social"'), reply
    assert helper.handle(b"http://ok.example/x 10.0.0.7 - GET") == "ERR\n"


def test_a_relative_warn_store_is_the_configuration_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule for relative paths: a relative file in ``warn_store`` is next to the
    configuration file, as list paths are, not in the current directory."""
    (tmp_path / "etc").mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    text = POLICY.format(store="sqlite:state/grants.db")
    (tmp_path / "etc" / "state").mkdir()
    policy = read_native(tomllib.loads(text), str(tmp_path / "etc" / "u.toml"))
    assert policy.warn_store == f"sqlite:{tmp_path / 'etc' / 'state' / 'grants.db'}"
    rules = [parse_rule("adult.example", BLOCK, "adult"), parse_rule("s.example", BLOCK, "social")]
    e = PolicyEngine(policy, Filter(rules))
    e.grant("http://s.example/", KID, seconds=60)
    assert (tmp_path / "etc" / "state" / "grants.db").is_file()
    assert not list(elsewhere.iterdir())
