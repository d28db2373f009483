"""The policy model: time rules, client sets, pass-list order, the native TOML tables (the
same decisions as the imported squidGuard.conf), and compile-time errors."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.policy import sgpolicy
from urlsieve import Filter
from urlsieve.exceptions import ConfigError, InvalidURL
from urlsieve.gateway.config import load_config
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import PolicyHelper
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.ruleset import policy_loader
from urlsieve.gateway.squid import HelperSettings
from urlsieve.policy.build import build_rules
from urlsieve.policy.clients import AddressSet, AddressSyntaxError, parse_address
from urlsieve.policy.engine import BLOCK, PASS, PolicyEngine, Who
from urlsieve.policy.model import Acl, Branch, PassEntry, Policy, PolicyError
from urlsieve.policy.native import read_native, to_toml
from urlsieve.policy.squidguard import read_squidguard
from urlsieve.policy.timerules import (
    DateEntry,
    TimeSyntaxError,
    WeeklyEntry,
    parse_days,
    parse_ranges,
)
from urlsieve.rules.model import BLOCK as RULE_BLOCK
from urlsieve.rules.model import parse_rule


def utc(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


# -- time rules ----------------------------------------------------------------------------


def test_weekly_ranges_include_their_start_and_exclude_their_end() -> None:
    entry = WeeklyEntry(parse_days(["mtwhf"]), parse_ranges(["08:00-12:00", "13:00-15:30"]))
    assert entry.holds(utc("2026-05-04 08:00"))  # Monday
    assert entry.holds(utc("2026-05-04 11:59"))
    assert not entry.holds(utc("2026-05-04 12:00"))
    assert entry.holds(utc("2026-05-04 15:29"))
    assert not entry.holds(utc("2026-05-04 15:30"))
    assert not entry.holds(utc("2026-05-09 10:00"))  # Saturday


def test_day_names_letters_and_star() -> None:
    assert parse_days(["s"]) == {6}
    assert parse_days(["a"]) == {5}
    assert parse_days(["mondays", "Sundays"]) == {0, 6}
    assert parse_days(["*"]) == set(range(7))
    with pytest.raises(TimeSyntaxError, match="not a day list"):
        parse_days(["mx"])


def test_dates_with_wildcards_and_ranges() -> None:
    eve = DateEntry.parse("*.12.24", ["09:00-12:00"])
    assert eve.holds(utc("2031-12-24 09:30"))
    assert not eve.holds(utc("2031-12-24 12:00"))
    assert not eve.holds(utc("2031-12-25 09:30"))
    summer = DateEntry.parse("2026.07.01-2026.08.31")
    assert summer.holds(utc("2026-07-01 00:00")) and summer.holds(utc("2026-08-31 23:59"))
    assert not summer.holds(utc("2026-09-01 00:00"))
    assert DateEntry.parse("2026.*.01").holds(utc("2026-03-01 10:00"))


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["12:00-08:00"], "ends before it starts"),
        (["08:00-12:00", "11:00-13:00"], "overlap"),
        (["25:00-26:00"], "no such time"),
        (["8-12"], "not a time range"),
        (["00:00-24:01"], "no such time"),
    ],
)
def test_impossible_or_overlapping_ranges_are_refused(tokens: list[str], message: str) -> None:
    with pytest.raises(TimeSyntaxError, match=message):
        parse_ranges(tokens)


@pytest.mark.parametrize(
    "text", ["2026.02.30", "2026.13.01", "2026.08.31-2026.07.01", "*.*.*-2026.01.01", "26.1.1"]
)
def test_impossible_dates_are_refused(text: str) -> None:
    with pytest.raises(TimeSyntaxError):
        DateEntry.parse(text)


# -- clients -------------------------------------------------------------------------------


def test_address_forms_and_their_edges() -> None:
    addresses = AddressSet.of(
        parse_address(t)
        for t in ["10.0.1.0/24", "10.0.5.0/255.255.255.0", "10.0.2.10-10.0.2.20", "2001:db8::/64"]
    )
    for inside in ["10.0.1.0", "10.0.1.255", "10.0.5.7", "10.0.2.10", "10.0.2.20", "2001:db8::1"]:
        assert inside in addresses, inside
    assert "::ffff:10.0.1.9" in addresses  # an IPv4-mapped IPv6 address is the IPv4 one
    for outside in ["10.0.0.255", "10.0.2.0", "10.0.2.9", "10.0.2.21", "2001:db8:0:1::1", "x", ""]:
        assert outside not in addresses, outside


@pytest.mark.parametrize(
    "text", ["10.0.0.1/24", "10.0.0.0/33", "10.0.0.9-10.0.0.1", "10.0.0.1-::1", "300.1.1.1"]
)
def test_invalid_addresses_are_refused(text: str) -> None:
    with pytest.raises(AddressSyntaxError):
        parse_address(text)


# -- pass-list order -----------------------------------------------------------------------


def _engine(passes: list[str]) -> PolicyEngine:
    rules = [
        parse_rule("both.example", RULE_BLOCK, "good"),
        parse_rule("both.example/deep/", RULE_BLOCK, "bad"),  # more specific, other dest
    ]
    policy = Policy(
        acls={
            "default": Acl(
                "default", Branch(tuple(PassEntry.parse(p) for p in passes), "http://b.test/%t")
            )
        }
    )
    return PolicyEngine(policy, Filter(rules))


def test_the_first_matching_pass_entry_decides_not_the_most_specific_rule() -> None:
    # squidGuard reads the pass list left to right: "good" first passes the URL, although
    # its rule in "bad" is more specific; the other order blocks it.
    url = "http://both.example/deep/page"
    assert _engine(["good", "!bad", "all"]).decide(url).action == PASS
    decision = _engine(["!bad", "good", "all"]).decide(url)
    assert (decision.action, decision.category) == (BLOCK, "bad")
    assert _engine(["!bad", "all"]).decide("http://both.example/").action == PASS
    # A pass list without a match passes (squidGuard); "none" blocks; "!all" too.
    assert _engine(["good"]).decide("http://other.example/").action == PASS
    assert _engine(["!bad"]).decide("http://other.example/").action == PASS
    assert _engine(["none"]).decide("http://both.example/").action == BLOCK
    assert _engine(["all", "!bad"]).decide(url).action == PASS


def test_unknown_client_falls_to_the_default_acl(tmp_path: Path) -> None:
    conf = sgpolicy.write_tree(tmp_path)
    read = read_squidguard(conf)
    rules = build_rules(read.policy)
    engine = PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)
    decision = engine.decide("http://ads.example/", Who("203.0.113.9", None, "nobody"), 0)
    assert (decision.source, decision.action, decision.category) == ("default", BLOCK, "ads")
    with pytest.raises(InvalidURL):
        engine.decide("http://exa mple.com/", Who("203.0.113.9"), 0)


# -- the native tables decide as the imported squidGuard.conf ------------------------------


TIMES = [
    "2026-05-04 10:00",
    "2026-05-04 12:30",
    "2026-05-09 10:00",
    "2026-12-24 10:00",
    "2026-05-04 20:00",
]


def _replies(engine: PolicyEngine, lines: list[str], when: str) -> list[str]:
    stamp = utc(when).timestamp()
    engine.clock = lambda: stamp
    helper = PolicyHelper(
        LiveRules(lambda: engine),
        HelperSettings(mode=HelperMode.REWRITE, redirect_url="http://unused.test/", channels=False),
    )
    return helper.handle_batch([ln.encode() for ln in lines])


def test_native_toml_decides_as_the_imported_squidguard_conf(tmp_path: Path) -> None:
    conf = sgpolicy.write_tree(tmp_path)
    native = sgpolicy.write_native(tmp_path)
    imported = read_squidguard(conf).policy
    imported.timezone = "UTC"
    rules = build_rules(imported)
    engine_imported = PolicyEngine(imported, rules.filter, expressions=rules.expressions)
    config = load_config(str(native), helper=True)
    load = policy_loader(config)
    assert load is not None
    engine_native = load()
    # And the imported policy written out as TOML (what `urlsieve import squidguard` writes).
    written = tmp_path / "written.toml"
    written.write_text(to_toml(imported))
    again = read_native(tomllib.loads(written.read_text()), str(written))
    engine_written = PolicyEngine(again, rules.filter, expressions=rules.expressions)
    lines = [sgpolicy.line(u, c) for u, c in sgpolicy.requests(1500, seed=3)]
    blocked = 0
    for when in TIMES:
        expected = _replies(engine_imported, lines, when)
        assert _replies(engine_native, lines, when) == expected, when
        assert _replies(engine_written, lines, when) == expected, when
        blocked += sum(r.startswith("OK") for r in expected)
    assert 0 < blocked < len(lines) * len(TIMES)


# -- errors at compile time ----------------------------------------------------------------


def _conf(tmp_path: Path, text: str) -> Path:
    (tmp_path / "db" / "porn").mkdir(parents=True, exist_ok=True)
    (tmp_path / "db" / "porn" / "domains").write_text("porn.example\n")
    path = tmp_path / "squidGuard.conf"
    path.write_text(f"dbhome {tmp_path / 'db'}\n" + text)
    return path


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("dest porn {\n domainlist porn/domains\n bogus x\n}\n", 4, "unknown statement 'bogus'"),
        ("time t {\n weekly mtwhf 12:00-08:00\n}\n", 3, "ends before it starts"),
        ("time t {\n weekly mtwhf 08:00-12:00 11:00-13:00\n}\n", 3, "overlap"),
        ("time t {\n date 2026.02.30\n}\n", 3, "2026.02.30"),
        ("dest porn {\n domainlist missing/domains\n}\n", 3, "no such file"),
        ("acl {\n default {\n pass all\n }\n", 2, "not closed"),
        ("rew r {\n s@a(@b@\n}\n", 3, "RE2"),
        ("rew r {\n s@a@b@x\n}\n", 3, "unknown flag"),
        ("frobnicate on\n", 2, "unknown statement 'frobnicate'"),
    ],
)
def test_bad_lines_are_reported_with_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = _conf(tmp_path, text + "acl {\n default {\n pass all\n }\n}\n")
    with pytest.raises(PolicyError, match=message) as caught:
        read_squidguard(path)
    assert str(caught.value).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "dest porn {\n domainlist porn/domains\n}\n"
            "acl {\n default {\n pass !porn !casino all\n }\n}\n",
            "undefined destination 'casino'",
        ),
        (
            "acl {\n kids within lessons {\n pass all\n }\n default {\n pass all\n }\n}\n",
            "undefined source 'kids'",
        ),
        (
            "src kids {\n ip 10.0.0.1\n}\n"
            "acl {\n kids within lessons {\n pass all\n }\n default {\n pass all\n }\n}\n",
            "undefined time rule 'lessons'",
        ),
        ("acl {\n default {\n pass all\n rewrite nope\n }\n}\n", "undefined rewrite 'nope'"),
        ("dest porn {\n domainlist porn/domains\n}\n", "no default ACL"),
        ("acl {\n default {\n pass all\n }\n else {\n pass all\n }\n}\n", "no time rule"),
    ],
)
def test_names_an_acl_uses_must_exist(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        read_squidguard(_conf(tmp_path, text))


def test_native_errors_name_their_table(tmp_path: Path) -> None:
    path = tmp_path / "u.toml"
    default = '[[acl]]\nsource = "default"\npass = ["all"]\n'
    for body, message in [
        ('[[acl]]\nsource = "default"\npass = ["!nope", "all"]\n', "undefined destination 'nope'"),
        (
            '[[time]]\nname = "t"\nweekly = ["mtwhf 09:00-08:00"]\n' + default,
            "ends before it starts",
        ),
        ('[[acl]]\nsource = "default"\npass = ["all"]\nwithin = "t"\noutside = "t"\n', "both set"),
        ('[[acl]]\nsource = "default"\npass = ["all"]\nfrobs = 1\n', "unknown key"),
        (
            '[policy]\ntimezone = "Mars/Olympus"\n[[acl]]\nsource = "default"\npass = ["all"]\n',
            "unknown time zone",
        ),
    ]:
        path.write_text(body)
        with pytest.raises(ConfigError, match=message):
            config = load_config(str(path), helper=True)
            loader = policy_loader(config)
            assert loader is not None
            loader()


def test_native_bad_address_is_skipped_and_named(tmp_path: Path) -> None:
    path = tmp_path / "u.toml"
    path.write_text(
        '[[source]]\nname = "a"\nip = ["10.0.0.0/40", "10.0.0.3"]\n'
        '[[acl]]\nsource = "default"\npass = ["all"]\n'
    )
    said: list[str] = []
    loader = policy_loader(load_config(str(path), helper=True), said.append)
    assert loader is not None
    engine = loader()
    assert "10.0.0.3" in engine.policy.sources[0].addresses
    assert engine.policy.skipped == [
        f"{path}: [[source]] #1 ('a'): '10.0.0.0/40': prefix /40 is not 0-32: entry skipped "
        "(squidGuard stops here and passes every request)"
    ]
    assert said[0] == f"skipped: {engine.policy.skipped[0]}"
    assert "the rest is in force" in said[-1]


# -- safe search ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "rewritten"),
    [
        ("http://www.google.de/search?q=x", "http://www.google.de/search?safe=active&q=x"),
        ("https://google.com/search?q=x&safe=off", "https://google.com/search?q=x&safe=active"),
        ("https://www.bing.com/search?adlt=off&q=x", "https://www.bing.com/search?adlt=strict&q=x"),
        ("https://duckduckgo.com/?q=x", "https://duckduckgo.com/?kp=1&q=x"),
        ("https://search.yahoo.com/search?p=x", "https://search.yahoo.com/search?vm=r&p=x"),
        ("https://yandex.ru/search/?text=x", "https://yandex.ru/search/?family=yes&text=x"),
        ("https://www.google.com/search?q=x&safe=active", None),  # already safe: passes as is
        ("http://example.com/search?q=x", None),
        ("http://google.com.evil.test/search?q=x", None),
    ],
)
def test_built_in_safe_search(url: str, rewritten: str | None) -> None:
    text = (
        '[[rewrite]]\nname = "safe"\nsafe_search = true\n'
        '[[acl]]\nsource = "default"\npass = ["all"]\nrewrite = "safe"\n'
    )
    policy = read_native(tomllib.loads(text), "/nowhere/u.toml")
    engine = PolicyEngine(policy, Filter([parse_rule("x.test")]))
    decision = engine.decide(url)
    assert decision.target == rewritten
    assert decision.action == (PASS if rewritten is None else "rewrite")


def test_the_guides_policy_example_reads_and_validates() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "policies.md").read_text("utf-8")
    start = text.index("# Policies")
    block = text[start:].split("```toml\n", 1)[1].split("```", 1)[0]
    data = tomllib.loads(block)
    policy = read_native(data, "/etc/urlsieve/urlsieve.toml")
    policy.validate(frozenset({"adult", "malware", "games", "social_networks"}))
    assert [s.name for s in policy.sources] == ["admins", "students"]
    assert str(policy.acls["students"].branch.passes[3]) == "?social_networks"


def test_a_tree_categorys_expressions_file_is_applied_under_a_policy(tmp_path: Path) -> None:
    games = tmp_path / "ut1" / "games"
    games.mkdir(parents=True)
    (games / "domains").write_text("games.example\n")
    (games / "expressions").write_text("(^|[./])casino[0-9]*\\.\n(a+)+\\1\n")
    (games / "very_restrictive_expression").write_text("game\n")
    (tmp_path / "u.toml").write_text(
        f'[rules]\nlists = ["{tmp_path / "ut1"}"]\n'
        '[[acl]]\nsource = "default"\npass = ["!games", "all"]\nredirect = "http://b.test/"\n'
    )
    load = policy_loader(load_config(str(tmp_path / "u.toml"), helper=True))
    assert load is not None
    engine = load()
    assert engine.decide("http://www.casino7.example/").category == "games"
    assert engine.decide("http://games.example/").category == "games"
    assert engine.decide("http://gamer.example/").action == PASS  # not the restrictive list
    rules = build_rules(engine.policy, [str(tmp_path / "ut1")])
    assert [w.line for w in rules.warnings] == [2]  # the back-reference RE2 cannot run
    assert "RE2" in str(rules.warnings[0])


def test_compile_config_writes_the_policy_snapshot_the_helper_loads(tmp_path: Path) -> None:
    """`urlsieve compile --config` on a policy: the destinations' lists and expressions go
    into the snapshot, and a configuration pointing at it decides as the lists do."""
    from urlsieve.cli import main

    sgpolicy.write_tree(tmp_path)
    native = sgpolicy.write_native(tmp_path)
    snapshot = tmp_path / "policy.snap"
    assert main(["compile", "--config", str(native), "-o", str(snapshot)]) == 0
    with_snapshot = tmp_path / "snap.toml"
    with_snapshot.write_text(native.read_text() + f'\n[rules]\nsnapshot = "{snapshot}"\n')
    engines = []
    for path in (native, with_snapshot):
        load = policy_loader(load_config(str(path), helper=True))
        assert load is not None
        engines.append(load())
    lines = [sgpolicy.line(u, c) for u, c in sgpolicy.requests(800, seed=8)]
    for when in TIMES[:2]:
        assert _replies(engines[1], lines, when) == _replies(engines[0], lines, when)
    assert (
        engines[1]
        .decide("http://www.casino7.example/", Who("10.0.1.5"), utc(TIMES[0]).timestamp())
        .category
        == "games"
    )


def test_an_alias_in_a_pass_list_over_a_compiled_snapshot(tmp_path: Path) -> None:
    """`!porn` where UT1's porn is an alias of adult, the policy loaded from the compiled
    snapshot (whose Filter has no load report): the alias's rules and expressions decide,
    and the lookup ends (it once looped for ever)."""
    import signal

    from urlsieve.cli import main

    tree = tmp_path / "ut1"
    (tree / "adult").mkdir(parents=True)
    (tree / "adult" / "domains").write_text("bad.example\n")
    (tree / "adult" / "expressions").write_text("(^|[./])xxx[0-9]*\\.\n")
    (tree / "porn").symlink_to("adult")
    config = tmp_path / "u.toml"
    config.write_text(
        f'[rules]\nlists = ["{tree}"]\nsnapshot = "{tmp_path / "p.snap"}"\n'
        '[[dest]]\nname = "porn"\nredirect = "http://b.test/porn"\n'
        '[[acl]]\nsource = "default"\npass = ["!porn", "all"]\nredirect = "http://b.test/"\n'
    )
    assert main(["compile", "--config", str(config)]) == 0
    load = policy_loader(load_config(str(config), helper=True))
    assert load is not None
    engine = load()
    signal.alarm(20)
    try:
        assert engine.decide("http://bad.example/").category == "porn"
        assert engine.decide("http://www.xxx3.example/").category == "porn"
        assert engine.decide("http://fine.example/").action == PASS
    finally:
        signal.alarm(0)


def test_within_is_reported_for_the_default_acl_out_of_its_time() -> None:
    text = (
        '[[time]]\nname = "never"\ndates = ["1999.01.01"]\n'
        '[[acl]]\nsource = "default"\nwithin = "never"\npass = ["none"]\n'
        'else = { pass = ["all"] }\n'
    )
    policy = read_native(tomllib.loads(text), "/nowhere/u.toml")
    engine = PolicyEngine(policy, Filter([parse_rule("x.test")]))
    decision = engine.decide("http://a.test/", Who("1.2.3.4"), 0)
    assert (decision.action, decision.within) == (PASS, False)


def test_a_second_block_for_one_statement_is_an_error(tmp_path: Path) -> None:
    path = _conf(tmp_path, "dest porn { domainlist porn/domains } { urllist x }\n")
    with pytest.raises(PolicyError, match="second block"):
        read_squidguard(path)
