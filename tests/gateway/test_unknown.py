"""The gateway's learning hook: unknown URLs go to a sink off the request path (bounded,
never raising), allowed the first time or blocked; learned rules come from an overlay
snapshot beside the base rules, which wins where both have a rule, and the overlay is
swapped in without reloading the base."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlsieve import Filter
from urlsieve.exceptions import ConfigError
from urlsieve.gateway import HelperMode, HelperSettings, LiveRules, SquidHelper
from urlsieve.gateway.config import GatewayConfig, load_config
from urlsieve.gateway.ruleset import LayeredLoader, filter_loader, rules_watch
from urlsieve.gateway.unknown import UNKNOWN_CATEGORY, SightingRow, UnknownFeed
from urlsieve.layered import OVERLAY_IDS, LayeredFilter

BLOCK_PAGE = "http://block.lan/?url=%u&cat=%c"


class Sink:
    def __init__(self, fail: int = 0) -> None:
        self.batches: list[list[SightingRow]] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, batch: Sequence[SightingRow]) -> None:
        with self.lock:
            if self.fail:
                self.fail -= 1
                raise ConnectionError("queue down")
            self.batches.append(list(batch))

    @property
    def urls(self) -> list[str]:
        return [url for batch in self.batches for url, _, _ in batch]


def base() -> Filter:
    return Filter.from_rules(["evil.com", "@@good.org", "shared.test/admin/"])


def overlay() -> Filter:
    return Filter.from_rules(["learned.test", "@@clean.test/", "shared.test", "@@good.org/x"])


def test_the_base_decides_and_the_overlay_fills_what_it_leaves_undecided() -> None:
    layered = LayeredFilter(base(), overlay())
    cases = {
        "http://evil.com/": ("block", "evil.com"),
        "http://good.org/x": ("allow", "good.org"),  # the administrator beats learned
        "http://learned.test/a": ("block", "learned.test"),
        "http://clean.test/": ("allow", "clean.test/"),
        "http://shared.test/admin/x": ("block", "shared.test/admin/"),
        "http://shared.test/other": ("block", "shared.test"),
        "http://unknown.test/": ("none", None),
    }
    urls = list(cases)
    for url, (action, pattern) in cases.items():
        verdict = layered.check(url)
        assert (verdict.action, verdict.rule and verdict.rule.pattern) == (action, pattern), url
    assert [v.action for v in layered.check_many(urls)] == [a for a, _ in cases.values()]
    ids = layered.decide_ids(urls)
    for url, rule_id in zip(urls, ids, strict=True):
        pattern = cases[url][1]
        if pattern is None:
            assert rule_id == -1
            continue
        assert isinstance(rule_id, int)
        assert layered.rule(rule_id).pattern == pattern
        assert layered.provenance(rule_id)[0] == cases[url][0]
        assert (rule_id >= OVERLAY_IDS) == (
            url not in ("http://evil.com/", "http://good.org/x")
            and not url.startswith("http://shared.test/admin")
        )
    assert "(learned) learned.test/" in layered.explain("http://learned.test/").probes
    assert LayeredFilter(base(), None).check("http://learned.test/").action == "none"


def test_the_feed_merges_bursts_and_delivers_off_the_request_path() -> None:
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0.01)
    for _ in range(50):
        feed.add("http://a.test/", "10.0.0.1")
    feed.add("http://a.test/", "10.0.0.2")
    feed.add("http://b.test/", None)
    assert feed.flush()
    feed.close()
    assert sorted(sink.urls) == ["http://a.test/", "http://a.test/", "http://b.test/"]
    assert feed.stats.seen == 52
    assert feed.stats.delivered == 3
    assert feed.stats.dropped == 0


def test_a_failing_sink_keeps_the_buffer_and_is_retried() -> None:
    sink = Sink(fail=2)
    logged: list[str] = []
    feed = UnknownFeed(sink, flush_seconds=0, retry_seconds=0.01, log=logged.append)
    feed.add("http://a.test/", None)
    assert feed.flush(timeout=10)
    feed.close()
    assert sink.urls == ["http://a.test/"]
    assert feed.stats.sink_errors == 2
    assert any("retrying" in m for m in logged) and any("again" in m for m in logged)


def test_a_full_buffer_drops_and_counts_never_blocks() -> None:
    gate = threading.Event()

    def stuck(batch: Sequence[SightingRow]) -> None:
        gate.wait(10)

    feed = UnknownFeed(stuck, capacity=3, flush_seconds=0)
    for i in range(100):
        feed.add(f"http://{i}.test/", None)
    assert feed.stats.dropped >= 96  # at most one batch with the sink, three waiting
    feed.add("x" * 10_000, None)  # over the URL cap
    gate.set()
    feed.close()
    assert feed.stats.seen == 101


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=30), st.none() | st.text(max_size=10)), max_size=20))
def test_the_feed_never_raises(items: list[tuple[str, str | None]]) -> None:
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0)
    for url, client in items:
        feed.add(url, client)
    assert feed.flush()
    feed.close()
    assert len(sink.urls) == len(set(items))


def _helper(mode: HelperMode, feed: UnknownFeed, *, block: bool) -> SquidHelper:
    settings = HelperSettings(
        mode=mode, redirect_url=None if mode is HelperMode.ACL else BLOCK_PAGE
    )
    rules = LiveRules(lambda: LayeredFilter(base(), overlay()))
    return SquidHelper(rules, settings, unknown=feed, block_unknown=block)


@pytest.mark.parametrize("mode", [HelperMode.REDIRECT, HelperMode.ACL])
@pytest.mark.parametrize("block", [False, True])
def test_the_helper_queues_unknown_urls_only(mode: HelperMode, block: bool) -> None:
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0)
    helper = _helper(mode, feed, block=block)
    lines = [
        b"1 http://evil.com/ 10.0.0.1/- - GET",
        b"2 http://learned.test/x 10.0.0.1/- - GET",
        b"3 http://clean.test/ 10.0.0.1/- - GET",
        b"4 http://unknown.test/a 10.0.0.9/- - GET",
        b"5 unknown2.test:443 10.0.0.8/- - CONNECT",
    ]
    batch = helper.handle_batch(lines)
    one_by_one = [helper.handle(line) for line in lines]
    assert batch == one_by_one
    assert batch[0].startswith("1 OK") and batch[1].startswith("2 OK")
    assert batch[2] == "3 ERR\n"
    if block:
        assert batch[3].startswith("4 OK")
        assert UNKNOWN_CATEGORY in batch[3]
    else:
        assert batch[3] == "4 ERR\n" and batch[4] == "5 ERR\n"
    assert feed.flush()
    feed.close()
    got = sorted({(u, c) for b in sink.batches for u, c, _ in b})
    assert got == [
        ("http://unknown.test/a", "10.0.0.9"),
        ("https://unknown2.test:443/", "10.0.0.8"),
    ]
    assert helper.stats.unknown == 4  # two unknown lines, twice


def test_without_a_feed_unknown_urls_are_allowed_as_before() -> None:
    settings = HelperSettings(mode=HelperMode.REDIRECT, redirect_url=BLOCK_PAGE)
    helper = SquidHelper(LiveRules(lambda: LayeredFilter(base(), overlay())), settings)
    assert helper.handle_batch([b"http://unknown.test/ 10.0.0.1/- - GET"]) == ["ERR\n"]
    assert helper.stats.unknown == 0


def test_an_overlay_swap_reloads_without_reading_the_base_again(tmp_path: Path) -> None:
    base_snap = tmp_path / "base.snap"
    overlay_snap = tmp_path / "learned.snap"
    base().save(base_snap)
    loads: list[str] = []

    def load_base() -> Filter:
        loads.append("base")
        return Filter.load(base_snap)

    loader = LayeredLoader(load_base, str(base_snap), str(overlay_snap))
    live = LiveRules(loader, watch=[str(base_snap), str(overlay_snap)], check_seconds=0)
    assert live.get().check("http://learned.test/").action == "none"  # nothing learned yet
    tmp = tmp_path / "tmp.snap"
    overlay().save(tmp)
    os.replace(tmp, overlay_snap)
    assert live.poll()
    assert live.get().check("http://learned.test/").action == "block"
    assert loads == ["base"]
    Filter.from_rules(["learned.test/other/"]).save(tmp)
    os.replace(tmp, overlay_snap)
    assert live.poll()
    assert live.get().check("http://learned.test/").action == "none"
    assert loads == ["base"]
    live.reload()  # an explicit reload (SIGHUP) reads the base again
    assert loads == ["base", "base"]
    overlay_snap.unlink()  # everything forgotten
    assert live.poll()
    assert live.get().check("http://learned.test/other/x").action == "none"


def test_config_learn_section(tmp_path: Path) -> None:
    conf = tmp_path / "gw.toml"
    conf.write_text(
        '[rules]\nlists = ["lists"]\n[learn]\nqueue = "sqlite:q.db"\noverlay = "learned.snap"\n'
        'directory = "state"\nlimit = 50\n',
        encoding="utf-8",
    )
    config = load_config(str(conf))
    assert config.unknown_policy == "allow-first"
    assert config.overlay == str(tmp_path / "learned.snap")
    assert rules_watch(config) == [str(tmp_path / "learned.snap")]
    assert isinstance(filter_loader(config), LayeredLoader)
    assert GatewayConfig(lists=("x",)).unknown_policy == "allow"
    with pytest.raises(ConfigError, match=r"learn\.queue"):
        GatewayConfig(lists=("x",), unknown="block").validate()
    with pytest.raises(ConfigError, match="allow-first"):
        GatewayConfig(lists=("x",), unknown="sometimes", learn_queue="memory:").validate()


@pytest.mark.parametrize("unknown", ["allow-first", "block"])
def test_the_service_queues_unknown_urls_for_the_peer(tmp_path: Path, unknown: str) -> None:
    from starlette.testclient import TestClient

    from urlsieve.service.app import create_app

    snapshot = tmp_path / "base.snap"
    base().save(snapshot)
    config = load_config(
        None,
        env={},
        overrides={"snapshot": str(snapshot), "learn_queue": "memory:", "unknown": unknown},
    )
    from urlsieve.learn.queue import open_queue
    from urlsieve.learn.sink import queue_sink

    queue = open_queue("memory:")  # the real sink: what the learner would be handed
    feed = UnknownFeed(queue_sink(queue), flush_seconds=0)
    with TestClient(create_app(config, unknown=feed)) as client:
        known = client.get("/v1/check", params={"url": "http://evil.com/"}).json()
        assert known["action"] == "block" and "unknown" not in known
        one = client.get("/v1/check", params={"url": "HTTP://New.Test:80/a"}).json()
        batch = client.post(
            "/v1/check",
            json={"urls": ["http://good.org/", "http://other.test/b", "http://ported.test:8080/c"]},
        ).json()["results"]
    assert one["unknown"] is True and batch[1]["unknown"] is True and "unknown" not in batch[0]
    expected = ("block", "unclassified") if unknown == "block" else ("none", None)
    assert (one["action"], one["category"]) == expected
    assert feed.flush()
    feed.close()
    queued = sorted(job.url for job in queue.claim("test", 10))
    # The port the client asked for is kept: the crawler must fetch that port.
    assert queued == ["http://new.test/a", "http://other.test/b", "http://ported.test:8080/c"]


def test_a_bad_overlay_never_costs_the_base_rules(tmp_path: Path) -> None:
    base_snap, overlay_snap, tmp = tmp_path / "base.snap", tmp_path / "o.snap", tmp_path / "t"
    base().save(base_snap)
    overlay_snap.write_bytes(b"not a snapshot at all")
    logged: list[str] = []
    loader = LayeredLoader(lambda: Filter.load(base_snap), str(base_snap), str(overlay_snap),
                           logged.append)  # fmt: skip
    live = LiveRules(loader, watch=[str(base_snap), str(overlay_snap)], check_seconds=0)
    rules = live.get()  # a corrupt overlay at start: the base alone, and why
    assert rules.check("http://evil.com/").action == "block"
    assert rules.check("http://learned.test/").action == "none"
    assert "none (base rules alone)" in logged[-1] and str(overlay_snap) in logged[-1]
    overlay().save(tmp)
    os.replace(tmp, overlay_snap)
    assert live.poll() and live.get().check("http://learned.test/").action == "block"
    tmp.write_bytes(b"garbage")  # a corrupt overlay renamed into place: the last good one
    os.replace(tmp, overlay_snap)
    live.poll()
    assert live.get().check("http://learned.test/").action == "block"
    assert "the last good one" in logged[-1]
    overlay().save(tmp)
    os.replace(tmp, overlay_snap)
    live.poll()
    with open(overlay_snap, "r+b") as fh:  # rewritten in place: the base stays, alone
        fh.seek(100)
        fh.write(b"\xff" * 64)
    assert live.poll() or live.loaded
    rules = live.get()
    assert rules.check("http://evil.com/").action == "block"
    assert rules.check("http://learned.test/").action == "none"


def test_a_policy_does_not_watch_the_overlay(tmp_path: Path) -> None:
    conf = tmp_path / "gw.toml"
    conf.write_text(
        '[rules]\nsquidguard_conf = "sg.conf"\n[learn]\noverlay = "o.snap"\n', encoding="utf-8"
    )
    config = load_config(str(conf), needs_rules=False)
    assert rules_watch(config) == [str(tmp_path / "sg.conf")]


def test_the_service_exports_what_the_learning_hook_did(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from urlsieve.service.app import create_app

    snapshot = tmp_path / "base.snap"
    base().save(snapshot)
    config = load_config(
        None, env={}, overrides={"snapshot": str(snapshot), "learn_queue": "memory:"}
    )
    sink = Sink()
    feed = UnknownFeed(sink, flush_seconds=0, capacity=1)
    with TestClient(create_app(config, unknown=feed)) as client:
        client.post("/v1/check", json={"urls": ["http://a.test/", "http://b.test/"]})
        assert feed.flush()
        text = client.get("/metrics").text
    feed.close()
    assert 'urlsieve_unknown_total{outcome="seen"} 2' in text
    queued = int(text.split('urlsieve_unknown_total{outcome="queued"} ')[1].split()[0])
    dropped = int(text.split('urlsieve_unknown_total{outcome="dropped"} ')[1].split()[0])
    assert queued + dropped == 2 and queued >= 1
