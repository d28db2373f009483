"""The assembly room (:mod:`urlsieve.config`): the configuration file read once into one
typed model, every relative path against the file, one decision between a snapshot and
the lists, and the same verdicts from every entry point built there (``urlsieve check``,
the Squid helper process, the service, the Scrapy middleware)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from urlsieve.config import (
    LEARN_OPTIONS,
    OPTIONS,
    base_loader,
    read_config,
    rules_loader,
    rules_source,
    snapshot_to_open,
)
from urlsieve.exceptions import ConfigError
from urlsieve.match.snapshot import compile_snapshot
from urlsieve.rules.model import BLOCK, parse_rule

TOKEN = "a-token-of-at-least-16-characters"

#: Every path-valued option, as written in the file (relative), and the file it names.
FILE_PATHS = {
    ("rules", "lists"): (["lists/ads", "lists/more.txt"], ["lists/ads", "lists/more.txt"]),
    ("rules", "allow"): (["allow.txt"], ["allow.txt"]),
    ("rules", "snapshot"): ("rules.snap", "rules.snap"),
    ("rules", "squidguard_conf"): ("sg/squidGuard.conf", "sg/squidGuard.conf"),
    ("service", "token_file"): ("secret/token", "secret/token"),
    ("service", "seen_store"): ("bloom:state/seen.bf?capacity=1000", "state/seen.bf"),
    ("learn", "overlay"): ("learned.snap", "learned.snap"),
    ("learn", "queue"): ("sqlite:state/queue.db", "state/queue.db"),
    ("console", "decision_log"): ("log/decisions.jsonl", "log/decisions.jsonl"),
    ("console", "templates"): ("templates", "templates"),
    ("console", "reviews"): ("state/reviews.db", "state/reviews.db"),
}
#: The learner's path-valued keys (LearnSettings), as written and as the file it names.
LEARN_PATHS = {
    "directory": ("state/learn", "state/learn"),
    "verdicts": ("state/verdicts.db", "state/verdicts.db"),
    "phrases": (["phrases/weighted"], ["phrases/weighted"]),
    "banned": (["phrases/banned"], ["phrases/banned"]),
    "exceptions": (["phrases/exceptions"], ["phrases/exceptions"]),
    "lexicons": (
        [{"path": "words.txt", "category": "adult", "weight": 20}],
        ["words.txt"],
    ),
}
PATH_KINDS = ("path", "paths", "spec", "store", "lexicons")


def toml_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def write_every_path(directory: Path, *, policy: bool = False) -> Path:
    """A file setting every path option; with ``policy``, a policy with a warn store in
    place of ``rules.squidguard_conf`` (the two exclude each other)."""
    sections: dict[str, list[str]] = {}
    for (section, key), (written, _) in FILE_PATHS.items():
        if not (policy and key == "squidguard_conf"):
            sections.setdefault(section, []).append(f"{key} = {toml_value(written)}")
    for key, (written, _) in LEARN_PATHS.items():
        sections["learn"].append(f"{key} = {toml_value(written)}")
    text = "".join(f"[{s}]\n" + "\n".join(lines) + "\n\n" for s, lines in sections.items())
    if policy:  # the policy's warn store: a relative file in a store spec, as the seen store
        text += (
            '[policy]\nwarn_store = "sqlite:state/grants.db"\n'
            'warn_page = "http://warn.test/?u=%u"\n'
            '[[acl]]\nsource = "default"\npass = ["all"]\n'
        )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ("policy.toml" if policy else "urlsieve.toml")
    path.write_text(text, encoding="utf-8")
    return path


def test_every_path_option_is_covered_here() -> None:
    """A path-valued option added to the tables must be added to this test's lists."""
    file_options = {(s, k) for s, k, _, kind in OPTIONS.values() if kind in PATH_KINDS}
    assert file_options == set(FILE_PATHS)
    learn_only = {k for k, (kind, _, _) in LEARN_OPTIONS.items() if kind in PATH_KINDS}
    assert learn_only - {"queue", "overlay"} == set(LEARN_PATHS)


def test_every_relative_path_is_the_configuration_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rule: a relative path in the file is relative to the file's directory, whatever
    the current directory, for every path option (gateway, learner, policy)."""
    conf = write_every_path(tmp_path / "etc" / "urlsieve")
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    config = read_config("../etc/urlsieve/urlsieve.toml", env={}, needs_rules=False)
    base = conf.parent.resolve()
    gateway = config.gateway
    attribute = {v[:2]: name for name, v in OPTIONS.items()}
    for key, (_written, named) in FILE_PATHS.items():
        value = getattr(gateway, attribute[key])
        if isinstance(named, list):
            assert value == tuple(str(base / n) for n in named), key
        else:
            assert str(base / named) in value, (key, value)
            assert value.endswith(str(base / named)) or "?" in value, (key, value)
    learn = config.learner()
    assert learn.queue == f"sqlite:{base / 'state/queue.db'}"
    assert learn.overlay == base / "learned.snap"
    assert learn.directory == base / "state/learn"
    assert learn.verdicts == str(base / "state/verdicts.db")
    for key in ("phrases", "banned", "exceptions"):
        assert getattr(learn, key) == tuple(base / n for n in LEARN_PATHS[key][1]), key
    assert [entry[0] for entry in learn.lexicons] == [base / "words.txt"]
    write_every_path(conf.parent, policy=True)
    policy = read_config("../etc/urlsieve/policy.toml", env={}, needs_rules=False).policy
    assert policy is not None
    assert policy.warn_store == f"sqlite:{base / 'state/grants.db'}"
    assert not list(here.iterdir())  # nothing was opened or created in the current directory


def test_paths_from_the_environment_and_the_command_line_are_the_current_directorys(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "etc" / "u.toml"
    conf.parent.mkdir()
    conf.write_text('[rules]\nlists = ["in-file.txt"]\n', encoding="utf-8")
    env = {"URLSIEVE_ALLOW": "allow.txt", "URLSIEVE_SEEN_STORE": "bloom:seen.bf"}
    config = read_config(str(conf), env=env, overrides={"snapshot": "rules.snap"}).gateway
    assert config.lists == (str(conf.parent.resolve() / "in-file.txt"),)
    assert (config.allow, config.seen_store, config.snapshot) == (
        ("allow.txt",),
        "bloom:seen.bf",
        "rules.snap",
    )
    assert config.origins["allow"] == "env:URLSIEVE_ALLOW"
    assert config.origins["snapshot"] == "option"


def test_the_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = write_every_path(tmp_path / "etc", policy=True)
    reads: list[object] = []
    load = tomllib.load

    def counting(fh: Any) -> dict[str, Any]:
        reads.append(fh)
        return load(fh)

    monkeypatch.setattr(tomllib, "load", counting)
    config = read_config(str(conf), env={}, needs_rules=False)
    assert len(reads) == 1
    assert config.gateway.source_file == config.path == str(conf)
    assert config.learn is not None and config.policy is not None


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("[rules]\nlists = 3\n", {}, r"\[rules\]: lists must be a list of paths, not 3"),
        ("[rules]\nsnapshot = 1\n", {}, r"\[rules\]: snapshot must be a path"),
        (
            "[squid]\nreload_check_seconds = 'soon'\n",
            {},
            r"\[squid\]: reload_check_seconds must be a number",
        ),
        ("[service]\nseen_store = 7\n", {}, r"\[service\]: seen_store must be a spec string"),
        (
            "[console]\nsecure_cookies = 'maybe'\n",
            {},
            r"\[console\]: console_secure_cookies must be true or false",
        ),
        ("[learn]\nlimit = 0\n", {}, r"\[learn\]: limit must be an integer from 1 to 1000000"),
        ("[learn]\nlimit = 'many'\n", {}, r"\[learn\]: limit must be an integer"),
        ("[learn]\nlease_seconds = 0\n", {}, r"\[learn\]: lease_seconds must be a number from 1"),
        ("[learn]\nphrases = 3\n", {}, r"\[learn\]: phrases must be a list of paths"),
        ("[learn.crawl]\ntimeout = 'x'\n", {}, r"\[learn\]: learn\.crawl\.timeout must be float"),
        ("[learn]\ncolour = 1\n", {}, r"unknown option learn\.colour"),
        ("[rules]\nlists = ['x']\n", {"URLSIEVE_BURST": "lots"}, r"\$URLSIEVE_BURST: burst"),
    ],
)
def test_a_wrong_type_names_the_file_the_section_and_the_key(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    conf = tmp_path / "u.toml"
    conf.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as caught:
        read_config(str(conf), env=env, needs_rules=False)
    if not env:
        assert str(conf) in str(caught.value)


def test_a_learn_section_of_the_gateway_alone_has_no_learner(tmp_path: Path) -> None:
    conf = tmp_path / "u.toml"
    conf.write_text('[rules]\nlists = ["x"]\n[learn]\nqueue = "sqlite:q.db"\n', "utf-8")
    config = read_config(str(conf), env={})
    assert config.gateway.learn_queue == f"sqlite:{tmp_path.resolve() / 'q.db'}"
    assert config.learn is None
    with pytest.raises(ConfigError, match=r"learn\.directory is required"):
        config.learner()
    conf.write_text('[rules]\nlists = ["x"]\n', "utf-8")
    with pytest.raises(ConfigError, match=r"no \[learn\] section"):
        read_config(str(conf), env={}).learner()


# -- the one decision between a snapshot and the lists -----------------------------------


def test_the_snapshot_or_the_lists(tmp_path: Path) -> None:
    snap = tmp_path / "rules.snap"
    compile_snapshot([parse_rule("evil.test", BLOCK, "malware", "x", 1)], snap)
    lists = tmp_path / "ads.txt"
    lists.write_text("ads.test\n", encoding="utf-8")
    assert snapshot_to_open([str(lists)], [], str(snap)) == str(snap)  # configured: wins
    assert snapshot_to_open([str(snap)], []) == str(snap)  # a lone compiled list is one
    assert snapshot_to_open([str(lists)], []) is None  # the lists
    with pytest.raises(ConfigError, match="is a compiled snapshot, a whole rule set"):
        snapshot_to_open([str(snap), str(lists)], [])
    with pytest.raises(ConfigError, match="is a compiled snapshot, a whole rule set"):
        snapshot_to_open([str(lists)], [str(snap)])
    # the gateway takes the same decision: a snapshot given as the only list is opened
    conf = tmp_path / "u.toml"
    conf.write_text('[rules]\nlists = ["rules.snap"]\n', "utf-8")
    config = read_config(str(conf), env={}).gateway
    rules = base_loader(config)()
    assert rules.info is not None and rules.check("http://evil.test/").action == BLOCK
    # a configured snapshot not compiled yet: the commands read the lists it comes from
    conf.write_text('[rules]\nlists = ["ads.txt"]\nsnapshot = "later.snap"\n', "utf-8")
    config = read_config(str(conf), env={}).gateway
    assert rules_source(config) is None
    (tmp_path / "later.snap").write_bytes(snap.read_bytes())
    assert rules_source(config) == str(tmp_path / "later.snap")


# -- one configuration, one verdict, whoever asks ----------------------------------------

#: url → (blocked?, category when blocked)
CASES = {
    "http://x.test/page": (True, "adult"),
    "http://casino.test/": (True, "gambling"),
    "http://n.test/": (False, None),  # news: in the lists, not in the selected categories
    "http://ok.x.test/": (False, None),  # the allow list
    "http://learned.test/a": (True, "learned-block"),  # the learned overlay
    "http://elsewhere.test/": (False, None),
}


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A configuration whose every path is relative, read from another directory."""
    etc = tmp_path / "etc"
    for category, domain in [("adult", "x.test"), ("gambling", "casino.test"), ("news", "n.test")]:
        (etc / "ut1" / category).mkdir(parents=True)
        (etc / "ut1" / category / "domains").write_text(f"{domain}\n")
    (etc / "allow.txt").write_text("ok.x.test\n")
    (etc / "state").mkdir()
    compile_snapshot(
        [parse_rule("learned.test", BLOCK, "learned-block", "learned", 1)],
        etc / "state" / "learned.snap",
    )
    conf = etc / "urlsieve.toml"
    conf.write_text(
        '[rules]\nlists = ["ut1"]\nallow = ["allow.txt"]\ncategories = ["adult", "gambling"]\n'
        '[squid]\nmode = "acl"\n'
        f'[service]\ntoken = "{TOKEN}"\n'
        '[learn]\noverlay = "state/learned.snap"\nunknown = "allow"\n',
        encoding="utf-8",
    )
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return conf


def test_every_entry_point_gives_the_same_verdicts(
    setup: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from urlsieve.cli import main

    urls = list(CASES)
    expected = [CASES[u] for u in urls]
    # urlsieve check --config
    status = main(["check", "--config", str(setup), *urls])
    lines = capsys.readouterr().out.splitlines()
    got = [(line.split("\t")[0] == "block", line.split("\t")[1]) for line in lines]
    assert [(b, c if b else None) for b, c in got] == expected, lines
    assert status == 3
    # the Squid helper process (external_acl_type: OK tag=category / ERR)
    helper = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(setup)],
        input="".join(f"{u} 10.0.0.1/- - GET\n" for u in urls),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    replies = helper.stdout.splitlines()
    assert [
        (r.startswith("OK"), r.split('tag="')[1].split('"')[0] if r.startswith("OK") else None)
        for r in replies
    ] == expected, (replies, helper.stderr)
    # the service
    from starlette.testclient import TestClient

    from urlsieve.service.app import create_app

    with TestClient(create_app(read_config(str(setup), env={}).gateway)) as client:
        for url, (blocked, category) in CASES.items():
            body = client.get("/v1/check", params={"url": url}).json()
            assert (body["action"] == "block", body["category"] if blocked else None) == (
                blocked,
                category,
            ), (url, body)
    # the Scrapy middleware, given the same file
    from scrapy import Request
    from scrapy.exceptions import IgnoreRequest
    from scrapy.utils.test import get_crawler

    from urlsieve.integrations.scrapy import UrlsieveFilterMiddleware

    middleware = UrlsieveFilterMiddleware.from_crawler(
        get_crawler(settings_dict={"URLSIEVE_CONFIG": str(setup)})
    )
    for url, (blocked, category) in CASES.items():
        if blocked:
            with pytest.raises(IgnoreRequest, match=f", {category}\\)"):
                middleware.process_request(Request(url))
        else:
            assert middleware.process_request(Request(url)) is None, url


def test_the_loader_of_a_policy_is_the_policy_engine(tmp_path: Path) -> None:
    (tmp_path / "adult").write_text("x.test\n")
    conf = tmp_path / "u.toml"
    conf.write_text(
        '[[dest]]\nname = "adult"\ndomainlist = "adult"\n'
        '[[acl]]\nsource = "default"\npass = ["!adult", "all"]\nredirect = "http://b.test/"\n',
        encoding="utf-8",
    )
    from urlsieve.policy.engine import PolicyEngine, Who

    loaded = rules_loader(read_config(str(conf), env={}).gateway)()
    assert isinstance(loaded, PolicyEngine)
    assert loaded.decide("http://x.test/", Who(None)).action == BLOCK
