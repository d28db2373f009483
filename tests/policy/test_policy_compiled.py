"""The compiled policy batch (``policy_decide``) against its reference, request by request
(:meth:`PolicyEngine.decide_many_py`): the same decisions for every source, time, pass
list, rewrite, expression list and hostile URL; and the rewrite prefilter it uses
(:func:`required_literal`) never passes over a URL a rewrite would change."""

from __future__ import annotations

import re
from array import array
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.needs import missing
from tests.policy import sgpolicy
from urlsieve._accel import speedups
from urlsieve.exceptions import InvalidURL
from urlsieve.policy import engine as engine_module
from urlsieve.policy.build import build_rules
from urlsieve.policy.engine import Decision, PolicyEngine, Who
from urlsieve.policy.expressions import _options, _re2, search_spans
from urlsieve.policy.rewrite import (
    MAX_NEEDLE,
    SAFE_SEARCH,
    RewriteSet,
    parse_substitution,
    required_literal,
)
from urlsieve.policy.squidguard import read_squidguard

#: Clock times (UTC) that put each source in and out of its time rules.
TIMES = [
    "2026-05-04 10:00:00",  # Monday, lessons
    "2026-05-04 12:30:00",  # lunch
    "2026-05-04 18:00:00",
    "2026-05-09 10:00:00",  # Saturday (guests within opening)
    "2026-12-24 10:00:00",
    "2026-07-15 10:00:00",
]
#: Every client of the policy, and some of none (the default ACL).
CLIENTS = [Who(*c) for c in sgpolicy.CLIENTS] + [
    Who("172.16.9.9", None, None),
    Who(None, None, None),
    Who("10.0.5.77", "pc.lab.school.test", "ROOT"),
]
#: URLs beyond the generator's: addresses (in-addr), rewrites, off the fast path, invalid.
EXTRA_URLS = [
    "http://1.2.3.4/",
    "http://[2001:db8::1]/porn",
    "http://0x7f.1/",
    "http://google.com/search?q=x",
    "http://www.GOOGLE.de/SEARCH?q=x",
    "http://old.school.example/a",
    "HTTP://OLD.SCHOOL.EXAMPLE/a",
    "http://x.test/zz/zz",
    "http://casino7.example/",
    "http://www.pokerstars.net/x",
    "http://porn.example/%7Ezz",
    "http://é.example/",
    "http:///nohost",
    "javascript:alert(1)",
    "porn.example/x",
    "",
    "http://google.com/" + "a" * 70_000,  # longer than the fast path takes
    "http://x.test/" + "/SEARCH?q" * 2_000,  # the needle scan over a long URL
    "http://x.test/" + "/searc" * 2_000 + "h?",
]


def _utc(when: str) -> float:
    return datetime.strptime(when, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def _compiled() -> Any:
    fn = getattr(speedups, "policy_decide", None)
    if fn is None:
        missing("urlsieve._speedups lacks policy_decide: a stale build (urlsieve doctor)")
    return fn


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> PolicyEngine:
    root: Path = tmp_path_factory.mktemp("sg")
    read = read_squidguard(sgpolicy.write_tree(root))
    read.policy.timezone = "UTC"
    rules = build_rules(read.policy)
    return PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)


def _same(got: list[Decision | InvalidURL], want: list[Decision | InvalidURL]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        if isinstance(b, InvalidURL):
            assert isinstance(a, InvalidURL) and str(a) == str(b)
        else:
            assert a == b


@pytest.mark.parametrize("when", TIMES)
def test_compiled_batches_decide_as_the_reference(engine: PolicyEngine, when: str) -> None:
    _compiled()
    requests = sgpolicy.requests(1500)
    urls = [url for url, _client in requests] + EXTRA_URLS * 3
    whos = [Who(*client) for _url, client in requests]
    whos += [CLIENTS[k % len(CLIENTS)] for k in range(len(urls) - len(whos))]
    stamp = _utc(when)
    want = engine.decide_many_py(urls, whos, stamp)
    got = engine.decide_many(urls, whos, stamp)
    _same(got, want)
    assert engine._compiled is not None  # the compiled tables were read
    # Batches of one, and of any cut, decide alike.
    ones = zip(urls[:200], whos[:200], strict=True)
    _same([engine.decide_many([u], [w], stamp)[0] for u, w in ones], want[:200])


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    picks=st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from([f"http://{h}{p}" for h in sgpolicy.HOSTS for p in sgpolicy.PATHS]),
                st.sampled_from(EXTRA_URLS),
                st.text(st.sampled_from("htp:/.ab1%?&=zZéG[]@"), max_size=30),
            ),
            st.sampled_from(CLIENTS),
        ),
        max_size=40,
    ),
    when=st.sampled_from(TIMES),
)
def test_any_batch_decides_as_the_reference(
    engine: PolicyEngine, picks: list[tuple[str, Who]], when: str
) -> None:
    _compiled()
    urls = [url for url, _ in picks]
    whos = [who for _, who in picks]
    _same(engine.decide_many(urls, whos, _utc(when)), engine.decide_many_py(urls, whos, _utc(when)))


def test_a_new_client_mid_batch_and_a_table_that_does_not_fit(
    engine: PolicyEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients resolved during the call (index_of), and plans the tables do not describe
    (a damaged block, one missing), are left to Python: the same decisions."""
    _compiled()
    stamp = _utc(TIMES[0])
    urls = [f"http://{h}/porn" for h in sgpolicy.HOSTS]
    whos = [CLIENTS[k % len(CLIENTS)] for k in range(len(urls))]
    want = engine.decide_many_py(urls, whos, stamp)
    engine._who.clear()
    _same(engine.decide_many(urls, whos, stamp), want)
    table, plan_at, shared, needles = engine._tables()
    for damage in ("size", "row", "position", "checks", "shared", "needles", "plans"):
        broken = array("q", table)
        at, s = list(plan_at), list(shared)
        n = list(needles)
        if damage == "size":
            broken[at[0]] = 1 << 40
        elif damage == "row":
            broken[at[0] + 1] = 1 << 40
        elif damage == "position":
            broken[at[0] + 4] = -1
        elif damage == "checks":
            broken[at[0] + 3] = len(broken)
        elif damage == "shared":
            s[0] = s[0][:-1]
        elif damage == "needles":
            n = [(b"",) for _ in n]
        else:
            at, s, n = at[:1], s[:1], n[:1]
        monkeypatch.setattr(engine, "_compiled", (broken, array("q", at), s, n))
        _same(engine.decide_many(urls, whos, stamp), want)
        monkeypatch.undo()


def test_without_the_extension_the_reference_answers(
    engine: PolicyEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = _utc(TIMES[0])
    urls = ["http://porn.example/", "http://1.2.3.4/", "http://google.com/search?q=a"]
    whos = [CLIENTS[3]] * 3
    want = engine.decide_many(urls, whos, stamp)
    monkeypatch.setattr(engine_module, "_policy_decide", None)
    _same(engine.decide_many(urls, whos, stamp), want)


def test_policy_decide_refuses_misuse(engine: PolicyEngine) -> None:
    fn = _compiled()
    table, plan_at, shared, needles = engine._tables()
    image = engine._image
    stride = len(engine._no_category)
    good = [
        image.view,
        image.layout,
        ["http://porn.example/"],
        [CLIENTS[0]],
        {},
        engine._index_of,
        table,
        plan_at,
        engine._masks,
        stride,
        shared,
        needles,
    ]
    decisions, _rest = fn(*good)
    assert len(decisions) == 1
    for at, value, error in [
        (2, ("http://porn.example/",), TypeError),
        (3, [CLIENTS[0], CLIENTS[1]], ValueError),
        (4, [], TypeError),
        (5, None, TypeError),
        (6, bytes(len(table) * 8), ValueError),
        (7, array("d", [0.0] * len(plan_at)), ValueError),
        (9, -1, ValueError),
        (10, shared[:-1], ValueError),
        (11, None, TypeError),
        (1, image.layout[:-1], TypeError),
    ]:
        args = list(good)
        args[at] = value
        with pytest.raises(error):
            fn(*args)
    with pytest.raises(TypeError):
        fn(*good[:-1])
    args = list(good)
    args[5] = lambda _who: -1  # a plan index below 0
    with pytest.raises(ValueError, match="below 0"):
        fn(*args)
    args[5] = lambda _who: 1 / 0  # an error in index_of stops the batch
    with pytest.raises(ZeroDivisionError):
        fn(*args)
    # index_of (Python code) empties the shared decisions mid-call: nothing is read from
    # them, every request is left to the caller (-2)
    args = list(good)
    mutable = list(shared)
    args[10] = mutable

    def emptying(who: Who) -> int:
        mutable.clear()
        return engine._index_of(who)

    args[5] = emptying
    left, rest = fn(*args)
    assert left == [None] and [outcome for _k, _p, outcome, _best in rest] == [-2]
    args = list(good)
    args[2] = [b"http://porn.example/"]  # not a str: the engine falls back to Python
    with pytest.raises(TypeError):
        fn(*args)


# -- the rewrite prefilter -----------------------------------------------------------------

PATTERNS = [parse_substitution(text).pattern for text in SAFE_SEARCH] + [
    r"(google\.[a-z]+/search\?)",
    r"^http://old\.school\.example/",
    r"(/zz)",
    r"a(bc)+d",
    r"x(?:yz)?w",
    r"(?i)CaSe",
    r"ab|cd",
    r"[ab]cd",
    r"a{2}b",
]


def test_required_literals() -> None:
    assert required_literal(r"(google\.[a-z]+/search\?)") == b"/search?"
    assert required_literal(r"^http://old\.school\.example/") == b"http://old.school.example/"
    assert required_literal(r"a(bc)+d") == b"bc"
    assert required_literal(r"x(?:yz)?w") == b"x"
    assert required_literal(r"(?i)CaSe") == b"case"
    assert required_literal(r"ab|cd") is None  # alternatives: nothing required
    assert required_literal(r"x{,3}") is None  # (RE2 reads this as a literal: not read here)
    assert required_literal(r"\pL+") is None  # RE2 syntax Python's parser refuses
    assert len(required_literal("a" * 100) or b"") == MAX_NEEDLE
    rewrites = RewriteSet({})
    assert rewrites.needles("absent") == ()


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.sampled_from(PATTERNS),
    text=st.lists(
        st.sampled_from(
            [
                "google.",
                "com",
                "de",
                "/search?",
                "http://",
                "https://",
                "www.",
                "bing.com/",
                "old.school.example/",
                "/zz",
                "a",
                "bc",
                "d",
                "xyz",
                "w",
                "case",
                "CASE",
                "GOOGLE.",
                "safe=",
                "&",
                "?",
                "aab",
            ]
        ),
        max_size=10,
    ).map("".join),
)
def test_a_url_a_pattern_matches_holds_its_literal(pattern: str, text: str) -> None:
    """The prefilter's promise: whatever the pattern matches (RE2, ignoring case as a
    substitution with ``i`` does) holds the required literal, ignoring case."""
    needle = required_literal(pattern)
    if needle is None:
        return
    options = _options()
    compiled = _re2().compile(pattern, options)
    if search_spans(compiled, text) is not None:
        assert needle.decode() in text.lower()
    strict = re.compile(pattern)
    if strict.search(text) is not None:
        assert needle.decode() in text.lower()
