"""Attacks on the self-learning gateway's glue: what a LAN client (or a page it names) can make
the learned lists say, the request path with learning on, the overlay reload, the review
commands. Each test is one attack; it fails if the attack works."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from urlsieve import Filter
from urlsieve.cli import main
from urlsieve.exceptions import InvalidURL, LearnError, QueueCorrupt
from urlsieve.gateway import HelperMode, HelperSettings, LiveRules, SquidHelper
from urlsieve.gateway.ruleset import LayeredLoader
from urlsieve.gateway.unknown import UNKNOWN_CATEGORY, SightingRow, UnknownFeed
from urlsieve.layered import LayeredFilter
from urlsieve.learn.overlay import build_overlay, promoted_hosts
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key
from urlsieve.url import CRAWLER, canonicalize

BLOCK_PAGE = "http://block.lan/?url=%u&cat=%c"


def learned(url: str, action: str, category: str = "porn", source: str = "learned") -> Learned:
    key, host = rule_key(url)
    return Learned(
        key=key,
        host=host,
        action=action,
        category=category if action == "block" else "clean",
        source=source,
        score=99,
        url=url,
        note="attack",
    )


def overlay_of(tmp: Path, verdicts: Sequence[Learned], *, promote_after: int = 3) -> Filter:
    with VerdictStore(tmp / "verdicts.db") as store:
        store.put(list(verdicts))
        build_overlay(store, tmp / "learned", tmp / "learned.snap", promote_after=promote_after)
    return Filter.load(tmp / "learned.snap")


# -- what a learned page rule covers ----------------------------------------------------------


def test_a_clean_root_page_does_not_allow_the_whole_host_and_its_subdomains(
    tmp_path: Path,
) -> None:
    """A client asks for the (clean) front page of a shared host: the learned allow must not
    cover every other page and every subdomain, which would then never be learned (and be
    allowed without classification even with ``unknown = "block"``)."""
    overlay = overlay_of(
        tmp_path,
        [learned("http://blogs.test/", "allow"), learned("http://forum.test/board", "allow")],
    )
    assert overlay.check("http://blogs.test/").action == "allow"
    assert overlay.check("HTTP://Blogs.TEST.:80/?utm=1").action == "allow"  # the page itself
    for other in (
        "http://blogs.test/porn/page.html",
        "http://evil.blogs.test/",
        "http://forum.test/board/porn-thread",
        "http://www.forum.test/board",
    ):
        verdict = overlay.check(other)
        assert verdict.action == "none", (other, verdict.rule and verdict.rule.pattern)


def test_a_dirty_page_blocks_that_page_not_its_subtree(tmp_path: Path) -> None:
    """One dirty page under a path is not a verdict on the pages below it (promotion, with
    its threshold, is the only way to a host rule)."""
    overlay = overlay_of(tmp_path, [learned("http://news.test/world", "block")])
    assert overlay.check("http://news.test/world").action == "block"
    assert overlay.check("http://news.test/world/sport").action == "none"
    assert overlay.check("http://m.news.test/world").action == "none"


@pytest.mark.parametrize("block", [False, True])
def test_a_learned_page_with_a_query_is_enforced_in_every_spelling_the_queue_merges(
    tmp_path: Path, block: bool
) -> None:
    """The queue merges ``?b=2&a=1``, ``?a=1&b=2&utm_source=x`` and ``?a=1&b=2&`` into one
    job (the crawler profile), so they must share its verdict: otherwise each other spelling
    stays unknown forever (the queue has seen the page) and is allowed first-time on every
    request, or held back forever in block mode."""
    client_url = "http://dirty.test/view?b=2&a=1"
    job = queue_url(client_url)
    overlay_of(tmp_path, [learned(job, "block")])
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0)
    helper = _layered_helper(tmp_path, HelperMode.REDIRECT, feed, block=block)
    spellings = [
        client_url,
        "http://dirty.test/view?a=1&b=2",
        "http://dirty.test/view?a=1&b=2&utm_source=mail",
        "http://dirty.test/view?b=2&a=1&",
        "http://dirty.test/view?fbclid=x&b=2&a=1",
        "http://DIRTY.test.:80/view?b=2&a=1",
        "http://u:p@%64irty.test/view?a=1&b=2",
        "http://dirty.test/view?%62=2&a=1",
    ]
    lines = [f"{n} {u} 10.0.0.5/- - GET".encode() for n, u in enumerate(spellings)]
    for reply in helper.handle_batch(lines):
        assert " OK " in reply and "porn" in reply, reply
    for url in spellings:
        rules = helper.rules.get()
        assert rules.check(url).action == "block", url
        assert rules.explain(url).verdict.action == "block", url
    assert helper.rules.get().check("http://dirty.test/view?a=2&b=2").action == "none"
    feed.close()
    assert sink.urls == []


def test_a_learned_page_with_a_query_on_an_address_is_enforced_in_any_spelling(
    tmp_path: Path,
) -> None:
    overlay = overlay_of(tmp_path, [learned(queue_url("http://203.0.113.9/v?b=2&a=1"), "block")])
    gateway = LayeredFilter(Filter.from_rules(["unrelated.example"]), overlay)
    for url in ("http://0xcb.0.113.9/v?a=1&b=2", "http://3405803785/v?b=2&a=1&utm_x=1"):
        assert gateway.check(url).action == "block", url
        assert gateway.decide_ids([url])[0] != -1, url


def queue_url(url: str) -> str:
    """The URL the learner's job carries for a client's ``url`` (the sink's form)."""
    return canonicalize(url, profile=CRAWLER)


def test_an_override_given_in_any_spelling_applies_to_every_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _config(tmp_path)
    url = "http://over.test/p?z=1&a=2"
    assert main(["learn", "--config", str(conf), "block", url, "--category", "cheat"]) == 0
    capsys.readouterr()
    base = tmp_path / "base.snap"
    Filter.from_rules(["blocked.test"]).save(base)
    layered = LayeredLoader(
        lambda: Filter.load(base), str(base), str(tmp_path / "state" / "learned.snap")
    )()
    for spelling in (url, "http://over.test/p?a=2&z=1", "http://over.test/p?a=2&z=1&utm_id=3"):
        assert layered.check(spelling).action == "block", spelling
    assert main(["learn", "--config", str(conf), "show", "http://over.test/p?a=2&z=1"]) == 0
    assert "cheat" in capsys.readouterr().out


def test_a_pipe_at_the_end_of_a_path_is_not_read_as_an_anchor(tmp_path: Path) -> None:
    """``/a|`` is another page than ``/a``: a site serving something clean at ``/a|`` must
    not get its dirty ``/a`` allowed (the list reader reads a trailing ``|`` as an anchor)."""
    overlay = overlay_of(
        tmp_path,
        [learned("http://pipe.test/a|", "allow"), learned("http://pipe.test/q?x|", "allow")],
    )
    assert overlay.check("http://pipe.test/a").action == "none"
    assert overlay.check("http://pipe.test/a%7C").action == "allow"
    assert overlay.check("http://pipe.test/q?x").action == "none"


_URLS = st.builds(
    lambda host, path, query: f"http://{host}/{path}" + (f"?{query}" if query is not None else ""),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}\.(test|example)", fullmatch=True),
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20),
    st.none() | st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(urls=st.lists(_URLS, min_size=1, max_size=6, unique=True), note=st.text(max_size=30))
def test_learned_lines_neither_inject_nor_drop_rules(
    tmp_path_factory: pytest.TempPathFactory, urls: list[str], note: str
) -> None:
    """Whatever the URL and the (page- or operator-given) note: one rule per verdict, every
    page decided as learned, and nothing else on its host decided."""
    tmp = tmp_path_factory.mktemp("inject")
    verdicts = {}
    asked: dict[str, str] = {}  # the client's spelling → its verdict's key
    for raw in urls:
        try:  # what reaches the learner: the sink's canonical form of the client's URL
            url = canonicalize(raw, profile=CRAWLER)
            verdict = learned(url, "block")
        except InvalidURL:
            continue
        verdicts[verdict.key] = Learned(**{**verdict.__dict__, "note": note})
        asked[raw] = verdict.key
    if not verdicts:
        return
    overlay = overlay_of(tmp, list(verdicts.values()), promote_after=0)
    assert len(overlay) == len(verdicts)
    for verdict in verdicts.values():
        assert overlay.check(verdict.url).action == "block", verdict.key
        other = f"http://{verdict.host}/zz-never-learned/x"
        assert overlay.check(other).action == "none", (verdict.key, other)
    gateway = LayeredFilter(Filter.from_rules(["unrelated.example"]), overlay)
    for raw, key in asked.items():  # the client asking again, as it spelled the URL
        assert gateway.check(raw).action == "block", (raw, key)
        assert gateway.decide_ids([raw])[0] != -1, (raw, key)


# -- host promotion -----------------------------------------------------------------------------


def test_redirects_do_not_promote_a_shared_host() -> None:
    """Three short links (or open redirects) of a shared host pointing at a blocked site say
    nothing about the host's own pages: they must not get the whole host blocked."""
    hops = [learned(f"http://short.test/{n}", "block", "porn", "redirect") for n in "abc"]
    assert promoted_hosts(hops, 3) == {}
    pages = [learned(f"http://dirty.test/{n}", "block") for n in "abc"]
    assert set(promoted_hosts(pages, 3)) == {"dirty.test"}


# -- the request path with learning on ----------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.urls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Sequence[SightingRow]) -> None:
        with self.lock:
            self.urls += [url for url, _, _ in batch]


def _layered_helper(
    tmp: Path, mode: HelperMode, feed: UnknownFeed, *, block: bool, channels: bool | None = None
) -> SquidHelper:
    base = tmp / "base.snap"
    Filter.from_rules(["evil.test", "@@good.test"]).save(base)
    loader = LayeredLoader(lambda: Filter.load(base), str(base), str(tmp / "learned.snap"))
    live = LiveRules(loader, watch=[str(base), str(tmp / "learned.snap")], check_seconds=0)
    settings_ = HelperSettings(
        mode=mode,
        redirect_url=None if mode is HelperMode.ACL else BLOCK_PAGE,
        channels=channels,
    )
    return SquidHelper(live, settings_, unknown=feed, block_unknown=block)


@pytest.mark.parametrize("block", [False, True])
def test_block_mode_holds_every_spelling_of_a_learned_dirty_page(
    tmp_path: Path, block: bool
) -> None:
    """A page learned dirty is blocked in every spelling a client can send (case, trailing
    dot, default port, userinfo, percent-escapes, a fragment); its clean neighbour stays
    unknown (held back in block mode, queued)."""
    overlay_of(tmp_path, [learned("http://dirty.test/en/casino.html", "block")])
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0)
    helper = _layered_helper(tmp_path, HelperMode.REDIRECT, feed, block=block)
    spellings = [
        "http://dirty.test/en/casino.html",
        "HTTP://DIRTY.TEST/en/casino.html",
        "http://dirty.test./en/casino.html",
        "http://dirty.test:80/en/casino.html",
        "http://user:pw@dirty.test/en/casino.html",
        "http://dirty.test/en/%63asino.html",
        "http://dirty.test/en/./casino.html",
        "http://dirty.test/x/../en/casino.html",
        "http://%64irty.test/en/casino.html",
        "http://dirty.test/en/casino.html#top",
    ]
    lines = [f"{n} {u} 10.0.0.5/- - GET".encode() for n, u in enumerate(spellings)]
    for reply in helper.handle_batch(lines):
        assert " OK " in reply and "porn" in reply, reply
    neighbour = helper.handle_batch([b"0 http://dirty.test/en/other.html 10.0.0.5/- - GET"])
    assert (UNKNOWN_CATEGORY in neighbour[0]) is block, neighbour
    feed.close()
    assert sink.urls == ["http://dirty.test/en/other.html"]


_LINE = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda chan, url, extra: (chan + url + extra).encode("utf-8", "surrogatepass"),
        st.sampled_from(["", "0 ", "17 ", "-1 ", "99999999999999999999 "]),
        st.sampled_from(
            ["http://new.test/", "new.test:443", "http://%zz/", "http://x/%", "", "http://[::1/"]
        )
        | st.text(max_size=60),
        st.sampled_from(["", " 10.0.0.1/- - GET", " - - CONNECT", " a b c d e f", "\r", "\x00"]),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(_LINE, min_size=1, max_size=8))
def test_hostile_lines_get_one_reply_each_with_learning_on(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes]
) -> None:
    tmp = tmp_path_factory.mktemp("lines")
    lines = [line.replace(b"\n", b" ") for line in lines]
    for mode in (HelperMode.REDIRECT, HelperMode.ACL):
        for block in (False, True):
            feed = UnknownFeed(Sink(), flush_seconds=0, capacity=4)
            helper = _layered_helper(tmp, mode, feed, block=block)
            replies = helper.handle_batch(lines)
            assert len(replies) == len(lines)
            assert all(r.endswith("\n") and r.count("\n") == 1 for r in replies)
            assert replies == [helper.handle(line) for line in lines]
            feed.close(timeout=1)


def test_a_flood_of_distinct_unknown_urls_stays_bounded_and_a_hung_sink_stalls_nothing(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    calls = []

    def hung(batch: Sequence[SightingRow]) -> None:
        calls.append(len(batch))
        gate.wait(30)

    feed = UnknownFeed(hung, capacity=1000, flush_seconds=0)
    helper = _layered_helper(tmp_path, HelperMode.REDIRECT, feed, block=False)
    for chunk in range(20):
        lines = [
            f"{n} http://u{chunk}-{n}.test/{'p' * 200} 10.0.0.{n % 250}/- - GET".encode()
            for n in range(2000)
        ]
        replies = helper.handle_batch(lines)
        assert replies == [f"{n} ERR\n" for n in range(2000)]
        assert feed.pending <= 1000
    assert feed.stats.seen == 40_000
    assert feed.stats.dropped >= 40_000 - 2000  # one batch with the sink, one buffer waiting
    gate.set()
    feed.close()


# -- the overlay on disk ------------------------------------------------------------------------


def test_a_corrupt_overlay_swapped_in_keeps_the_previous_rules_and_says_why(
    tmp_path: Path,
) -> None:
    base = tmp_path / "base.snap"
    Filter.from_rules(["evil.test"]).save(base)
    overlay = tmp_path / "learned.snap"
    Filter.from_rules(["learned.test"]).save(overlay)
    logged: list[str] = []
    loader = LayeredLoader(lambda: Filter.load(base), str(base), str(overlay), logged.append)
    live = LiveRules(loader, watch=[str(base), str(overlay)], check_seconds=0, log=logged.append)
    assert live.get().check("http://learned.test/").action == "block"
    bad = tmp_path / "bad.snap"
    bad.write_bytes(b"\x00garbage" * 100)
    os.replace(bad, overlay)
    live.poll()  # the loader keeps the last good overlay: the swap succeeds with it
    assert live.get().check("http://learned.test/").action == "block"
    assert live.get().check("http://evil.test/").action == "block"
    assert live.get().check("http://other.test/").action == "none"
    assert any("learned.snap" in m and "keeping the last good one" in m for m in logged), logged


# -- the learner's files and the review commands ------------------------------------------------


def _config(tmp: Path) -> Path:
    (tmp / "lists" / "blocked").mkdir(parents=True)
    (tmp / "lists" / "blocked" / "domains").write_text("blocked.test\n", encoding="utf-8")
    conf = tmp / "gw.toml"
    conf.write_text(
        '[rules]\nlists = ["lists"]\n[learn]\nqueue = "sqlite:state/queue.db"\n'
        'overlay = "state/learned.snap"\ndirectory = "state"\n',
        encoding="utf-8",
    )
    return conf


@pytest.mark.parametrize(
    "category", ["../../../escaped", "", "..", "{tmp}/absolute", "a/b", ".hidden", "a\\b\x00"]
)
def test_an_override_category_never_writes_outside_the_tree(
    tmp_path: Path, category: str, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _config(tmp_path)
    category = category.format(tmp=tmp_path)
    before = set(tmp_path.rglob("*"))
    status = main(
        ["learn", "--config", str(conf), "block", "http://x.test/a", "--category", category]
    )
    capsys.readouterr()
    tree = tmp_path / "state" / "learned"
    made = set(tmp_path.rglob("*")) - before
    outside = [
        p for p in made if p.is_file() and tree not in p.parents and p.parent != tmp_path / "state"
    ]
    assert outside == [], outside
    if status == 0:  # accepted: then it is enforced
        assert Filter.load(tmp_path / "state" / "learned.snap").check("http://x.test/a").action == (
            "block"
        )


@pytest.mark.parametrize("target", ["com", "http://com/", "org"])
def test_an_override_the_lists_cannot_hold_is_refused_not_reported_done(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``learn block com`` cannot be a rule (a top-level domain): it must fail with why, not
    say "overlay rebuilt" and enforce nothing."""
    conf = _config(tmp_path)
    status = main(["learn", "--config", str(conf), "block", target])
    out = capsys.readouterr()
    assert status != 0
    assert "top-level domain" in out.err, out


def test_a_corrupt_verdict_database_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.db"
    path.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    with pytest.raises(QueueCorrupt, match=r"verdicts\.db"):
        VerdictStore(path).count()


def test_learn_show_on_a_corrupt_database_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _config(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "verdicts.db").write_bytes(b"not a database at all" * 100)
    status = main(["learn", "--config", str(conf), "show", "http://x.test/"])
    err = capsys.readouterr().err
    assert status != 0
    assert "verdicts.db" in err and "Traceback" not in err


def test_a_verdict_row_with_bad_evidence_does_not_stop_the_overlay_build(tmp_path: Path) -> None:
    """One damaged row (edited by hand, a half-written evidence column) must not keep every
    other learned rule from being enforced."""
    with VerdictStore(tmp_path / "verdicts.db") as store:
        store.put([learned("http://a.test/x", "block"), learned("http://b.test/y", "block")])
    db = sqlite3.connect(tmp_path / "verdicts.db")
    db.execute("UPDATE verdict SET evidence='{not json' WHERE key='a.test/x'")
    db.commit()
    db.close()
    with VerdictStore(tmp_path / "verdicts.db") as store:
        build_overlay(store, tmp_path / "learned", tmp_path / "learned.snap")
    assert Filter.load(tmp_path / "learned.snap").check("http://b.test/y").action == "block"


def test_a_damaged_page_of_the_verdict_database_is_a_typed_error(tmp_path: Path) -> None:
    """Damage found after opening (a bad page in the middle) is :class:`QueueCorrupt` naming
    the file, not a bare sqlite3 error out of the learner or ``learn list``."""
    path = tmp_path / "verdicts.db"
    with VerdictStore(path) as store:
        store.put([learned(f"http://h{n}.test/{'p' * 300}", "block") for n in range(400)])
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(size // 2)
        fh.write(b"\xff" * 8192)
    with VerdictStore(path) as store, pytest.raises(QueueCorrupt, match=r"verdicts\.db"):
        list(store.all())


def test_a_note_or_url_that_is_not_text_is_a_typed_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``learn block URL --note …`` with a byte that is not UTF-8 (kept by Python as a lone
    surrogate): an error message, not a traceback."""
    with VerdictStore(tmp_path / "v.db") as store, pytest.raises(LearnError, match=r"v\.db"):
        store.put([Learned(**{**learned("http://a.test/", "block").__dict__, "note": "\udcff"})])
    conf = _config(tmp_path)
    status = main(["learn", "--config", str(conf), "block", "http://x.test/\udcff"])
    assert status != 0 and "verdicts.db" in capsys.readouterr().err
