"""Policies under hostile bytes: the policy helper answers every line once and never lets a
spelling of a blocked URL through, whoever asks; a squidGuard.conf or a TOML policy of
arbitrary content gives a PolicyError (file:line) or a policy, never another exception."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import FUZZ
from tests.fuzz.strategies import blocked_spellings, hostile_lines, squid_escape
from urlsieve.exceptions import ConfigError
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import PolicyHelper
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.squid import HelperSettings
from urlsieve.policy.build import build_rules
from urlsieve.policy.engine import PolicyEngine
from urlsieve.policy.native import read_native
from urlsieve.policy.squidguard import read_squidguard

CONF = """\
dbhome {db}
time always {{
    weekly * 00:00-24:00
}}
dest bad {{
    domainlist bad/domains
    urllist bad/urls
}}
dest good {{
    domainlist good/domains
}}
src kids {{
    ip 10.0.0.0/24
    within always
}}
src staff {{
    user alice
}}
acl {{
    kids within always {{
        pass !bad good !in-addr all
        redirect http://block.test/?t=%t&u=%u&a=%a&n=%n&i=%i&p=%p
    }} else {{
        pass none
    }}
    staff {{
        pass !bad all
        redirect 302:http://block.test/staff?u=%u
    }}
    default {{
        pass !bad all
        redirect http://block.test/default?u=%u
    }}
}}
"""

#: Who asks: a source with a time rule, a user source, nobody (the default ACL), junk.
WHO = (
    b" 10.0.0.7/pc7.lan - GET",
    b" 10.9.9.9/- alice GET",
    b" 192.0.2.1/- - GET",
    b" \xff/\xfe \xfd",
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> PolicyEngine:
    root = tmp_path_factory.mktemp("policy-fuzz")
    for name, lines in (("bad", "bad.org\n10.9.8.7\n"), ("good", "good.org\n")):
        (root / name).mkdir()
        (root / name / "domains").write_text(lines)
    (root / "bad" / "urls").write_text("ads.example/ads\nlatin.example/caf%E9\n")
    conf = root / "squidGuard.conf"
    conf.write_text(CONF.format(db=root))
    read = read_squidguard(conf)
    rules = build_rules(read.policy)
    return PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)


def _helpers(engine: PolicyEngine) -> list[PolicyHelper]:
    return [
        PolicyHelper(
            LiveRules(lambda: engine),
            HelperSettings(mode=mode, redirect_url="http://fallback.test/", channels=False),
        )
        for mode in (HelperMode.REWRITE, HelperMode.REDIRECT, HelperMode.ACL)
    ]


def _one_reply(reply: str) -> None:
    assert reply.endswith("\n") and reply.count("\n") == 1
    assert reply.isascii() and reply[:-1].isprintable()
    assert reply[:-1].split(" ", 1)[0] in ("OK", "ERR", "BH")


@FUZZ
@given(line=hostile_lines, who=st.sampled_from(WHO))
def test_every_line_gets_one_reply(engine: PolicyEngine, line: bytes, who: bytes) -> None:
    for helper in _helpers(engine):
        for candidate in (line, line + who):
            _one_reply(helper.handle(candidate))
        replies = helper.handle_batch([line, line + who, b"http://good.org/" + who])
        assert len(replies) == 3
        for reply in replies:
            _one_reply(reply)


@FUZZ
@given(url=blocked_spellings(), who=st.sampled_from(WHO[:3]))
def test_no_spelling_of_a_blocked_url_passes_whoever_asks(
    engine: PolicyEngine, url: bytes, who: bytes
) -> None:
    for helper in _helpers(engine):
        sent = squid_escape(url) if helper.settings.mode is HelperMode.ACL else url
        for reply in (helper.handle(sent + who), helper.handle_batch([sent + who])[0]):
            assert reply.startswith("OK"), (url, who, reply)


@FUZZ
@given(data=st.binary(max_size=2000))
def test_any_squidguard_conf_reads_or_fails_cleanly(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("conf") / "squidGuard.conf"
    path.write_bytes(data)
    try:
        read_squidguard(path)
    except ConfigError as exc:
        assert str(exc).startswith(str(path))


_VALUES = st.recursive(
    st.one_of(st.text(max_size=30), st.integers(), st.booleans(), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    [
        "name",
        "source",
        "pass",
        "ip",
        "user",
        "weekly",
        "dates",
        "within",
        "outside",
        "else",
        "redirect",
        "rewrite",
        "substitutions",
        "domain",
        "iplist",
        "domainlist",
    ]
)


@FUZZ
@given(
    tables=st.dictionaries(
        st.sampled_from(["acl", "source", "time", "dest", "rewrite", "policy"]),
        st.one_of(st.lists(st.dictionaries(_KEYS, _VALUES, max_size=5), max_size=3), _VALUES),
        max_size=4,
    )
)
def test_any_toml_policy_reads_or_fails_cleanly(tables: dict[str, object]) -> None:
    data = {k: v for k, v in tables.items() if v is not None}
    with contextlib.suppress(ConfigError):
        read_native(data, str(Path("/nonexistent/u.toml"))).validate()


@FUZZ
@given(line=hostile_lines)
def test_the_failure_mode_renders_the_default_policy_page(
    engine: PolicyEngine, line: bytes
) -> None:
    """The page the CLI uses when a policy names none has squidGuard's codes (%s, %t):
    the failure mode must render it too (it once raised KeyError out of handle())."""
    from urlsieve.gateway.policy_helper import POLICY_FALLBACK_PAGE

    for mode in (HelperMode.REWRITE, HelperMode.REDIRECT):
        helper = PolicyHelper(
            LiveRules(lambda: engine),
            HelperSettings(mode=mode, redirect_url=POLICY_FALLBACK_PAGE, channels=False),
        )
        for candidate in (
            line,
            b"https:// 10.0.0.7/- - GET",
            b"http://exa mple.com/ 1.2.3.4/- - GET",
        ):
            reply = helper.handle(candidate)
            _one_reply(reply)
            assert helper.handle_batch([candidate]) == [reply]
        assert "urlsieve-failure" in helper.handle(b"https:// 10.0.0.7/- - GET")
