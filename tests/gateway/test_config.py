"""The gateway configuration: TOML file, environment overrides, contradictions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from urlsieve.exceptions import ConfigError
from urlsieve.gateway.config import FailureMode, describe, load_config, parse_bind
from urlsieve.gateway.protocol import HelperMode

TOKEN = "s3cret-token-0123456789"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "urlsieve.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


FULL = f"""
[rules]
lists = ["lists/ut1"]
allow = ["/etc/urlsieve/allow.txt"]
categories = ["adult", "malware"]
snapshot = "rules.snap"

[squid]
mode = "redirect"
redirect_url = "http://block.lan/?url=%u&category=%c&client=%a"
redirect_status = 303
failure_mode = "open"
reload_check_seconds = 0.5

[service]
bind = "127.0.0.1:9000"
token = "{TOKEN}"
seen_store = "memory:"
"""


def test_full_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), env={})
    assert config.lists == (str(tmp_path / "lists/ut1"),)  # relative to the file
    assert config.allow == ("/etc/urlsieve/allow.txt",)
    assert config.categories == ("adult", "malware")
    assert config.snapshot == str(tmp_path / "rules.snap")
    assert config.mode is HelperMode.REDIRECT
    assert config.status == 303
    assert config.failure_mode is FailureMode.OPEN
    assert config.reload_check_seconds == 0.5
    assert parse_bind(config.bind) == ("127.0.0.1", 9000)
    assert config.read_token() == TOKEN
    assert config.seen_store == "memory:"
    assert config.origins["mode"] == "file"
    assert TOKEN not in repr(config)


def test_precedence_option_over_env_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    env = {
        "URLSIEVE_FAILURE_MODE": "closed",
        "URLSIEVE_BIND": "127.0.0.1:9001",
        "URLSIEVE_LISTS": os.pathsep.join(["/a", "/b"]),
        "URLSIEVE_CATEGORIES": "adult, gambling",
    }
    config = load_config(path, env=env, overrides={"bind": "127.0.0.1:9002", "mode": None})
    assert config.failure_mode is FailureMode.CLOSED
    assert config.origins["failure_mode"] == "env:URLSIEVE_FAILURE_MODE"
    assert config.bind == "127.0.0.1:9002"
    assert config.origins["bind"] == "option"
    assert config.lists == ("/a", "/b")
    assert config.categories == ("adult", "gambling")
    assert config.mode is HelperMode.REDIRECT  # None overrides are ignored
    assert config.origins["mode"] == "file"


def test_config_file_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    config = load_config(None, env={"URLSIEVE_CONFIG": path})
    assert config.source_file == path


def test_defaults() -> None:
    config = load_config(None, env={}, overrides={"snapshot": "/x.snap", "mode": "acl"})
    assert config.failure_mode is FailureMode.CLOSED
    assert config.status == 302
    assert config.bind == "127.0.0.1:8399"
    assert config.read_token() is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[rules]\nlist = ['x']\n", r"unknown option rules\.list .*known in \[rules\]: allow"),
        ("[rulez]\n", r"unknown section \[rulez\]"),
        ("[rules]\nlists = 5\n", "lists must be a list of paths"),
        ("[squid]\nmode = 'acl'\n", "no rules: set rules.lists"),
        ("[rules]\nlists = ['x']\n[squid]\nmode = 'redirect'\n", "needs squid.redirect_url"),
        (
            "[rules]\nlists=['x']\n[squid]\nmode='rewrite'\nredirect_url='http://b/'\n"
            "redirect_status=302\n",
            "contradicts squid.mode='rewrite'",
        ),
        (
            "[rules]\nlists=['x']\n[squid]\nredirect_url='http://b/'\nredirect_status=200\n",
            "Squid accepts 301, 302, 303, 307, 308",
        ),
        ("[rules]\nlists=['x']\n[squid]\nmode='block'\n", "mode must be one of 'redirect'"),
        (
            "[rules]\nlists=['x']\n[squid]\nmode='acl'\nfailure_mode='maybe'\n",
            "failure_mode must be one of 'closed', 'open'",
        ),
        (
            f"[rules]\nlists=['x']\n[squid]\nmode='acl'\n[service]\ntoken='{TOKEN}'\n"
            "token_file='/t'\n",
            "both set: keep one",
        ),
        (
            "[rules]\nlists=['x']\n[squid]\nmode='acl'\n[service]\ntoken='short'\n",
            "shorter than 16",
        ),
        (
            "[rules]\nlists=['x']\n[squid]\nmode='acl'\n[service]\nbind='localhost'\n",
            "write HOST:PORT",
        ),
        (
            "[rules]\nlists=['x']\n[squid]\nmode='acl'\n[service]\nseen_store='nope'\n",
            "has no backend",
        ),
        ("[rules]\nlists=['x']\n[squid]\nredirect_url='http://b/?%z'\n", "unknown substitution"),
        ("[rules\n", "not valid TOML"),
    ],
)
def test_invalid_and_contradictory(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), env={}, helper=True)


def test_the_block_page_is_needed_by_the_helper_only(tmp_path: Path) -> None:
    path = write(tmp_path, "[rules]\nlists = ['x']\n")
    assert load_config(path, env={}).redirect_url is None  # fine for the service
    with pytest.raises(ConfigError, match=r"needs squid\.redirect_url"):
        load_config(path, env={}, helper=True)


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$URLSIEVE_REDIRECT_STATUS"):
        load_config(write(tmp_path, FULL), env={"URLSIEVE_REDIRECT_STATUS": "soon"})


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_config("/nonexistent/urlsieve.toml", env={})


def test_token_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    path = write(
        tmp_path, f"[rules]\nlists=['x']\n[squid]\nmode='acl'\n[service]\ntoken_file='{token}'\n"
    )
    assert load_config(path, env={}).read_token() == TOKEN


def test_describe_says_what_happens(tmp_path: Path) -> None:
    text = "\n".join(describe(load_config(write(tmp_path, FULL), env={})))
    assert "redirects blocked URLs to http://block.lan/" in text
    assert "with status 303" in text
    assert "allow every request and log why" in text
    assert "categories blocked: adult, malware" in text
    assert "token set (hidden)" in text
    assert TOKEN not in text
