"""The learner end to end, in-process: URLs the gateway queued are crawled from a loopback
origin, classified, written as learned lists and compiled into the overlay, which the
gateway's rules then enforce; overrides survive re-learning; the review commands say why."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.learn.origin import BLOCKED_HOST, PAGES, Origin, origin_server
from urlsieve.cli import main
from urlsieve.gateway.config import load_config
from urlsieve.gateway.ruleset import filter_loader
from urlsieve.learn.queue import Sighting, open_queue
from urlsieve.learn.sink import queue_sink

PHRASES = Path(__file__).parent / "data" / "phrases"


#: One host per page, so that no host is promoted by accident.
def host_of(path: str) -> str:
    return path.strip("/").replace("/", "-").replace(".", "-") + ".test"


def write_config(tmp: Path, origin: Origin, *, promote_after: int = 0) -> Path:
    lists = tmp / "lists" / "blocked"
    lists.mkdir(parents=True)
    (lists / "domains").write_text(f"{BLOCKED_HOST}\n", encoding="utf-8")
    hosts = {host_of(p): "127.0.0.1" for p in PAGES} | {BLOCKED_HOST: "127.0.0.1"}
    hosts["promo.test"] = "127.0.0.1"
    conf = tmp / "gateway.toml"
    conf.write_text(
        f"""
[rules]
lists = ["lists"]

[learn]
queue = "sqlite:state/queue.db"
overlay = "state/learned.snap"
directory = "state"
phrases = ["{PHRASES / "weightedphraselist"}"]
banned = ["{PHRASES / "bannedphraselist"}"]
exceptions = ["{PHRASES / "exceptionphraselist"}"]
lexicons = [{{ path = "{PHRASES / "lexicon_zh.txt"}", category = "gambling", weight = 30 }}]
limit = 50
promote_after = {promote_after}
batch = 16

[learn.crawl]
timeout = 2.0
max_bytes = 1000000
allow_networks = ["127.0.0.0/8"]
hosts = {json.dumps(hosts).replace('":', '" =')}

[learn.spool]
segment_seconds = 0.2
""",
        encoding="utf-8",
    )
    return conf


@pytest.fixture
def origin() -> Iterator[Origin]:
    with origin_server() as served:
        yield served


def offer(conf: Path, urls: list[str]) -> None:
    state = conf.parent / "state"
    state.mkdir(exist_ok=True)
    queue = open_queue(f"sqlite:{state / 'queue.db'}")
    try:
        sink = queue_sink(queue)
        sink([(url, "10.0.0.7", time.time()) for url in urls])
    finally:
        queue.close()


def learn(conf: Path, *extra: str) -> int:
    return main(["learn", "--config", str(conf), *extra])


def test_unknown_pages_are_learned_and_enforced(tmp_path: Path, origin: Origin) -> None:
    conf = write_config(tmp_path, origin)
    urls = {path: f"http://{host_of(path)}:{origin.port}{path}" for path in PAGES}
    offer(conf, [*urls.values(), *urls.values()])  # every URL offered twice: queued once
    assert learn(conf, "run", "--until-idle") == 0
    rules = filter_loader(load_config(str(conf)))()
    for path, route in PAGES.items():
        if path == "/robots.txt":  # a text page like any other to the learner
            continue
        verdict = rules.check(urls[path])
        if route.expect == "-":
            assert verdict.action == "none", (path, verdict)  # never classified: still unknown
        elif route.expect == "redirect":
            assert (verdict.action, verdict.category) == ("block", "blocked"), path
        elif route.expect is None:
            assert (verdict.action, verdict.category) == ("allow", "clean"), (path, verdict)
        else:
            assert (verdict.action, verdict.category) == ("block", route.expect), (path, verdict)
    # Every page fetched once; the robots-disallowed one never; the blocked host never.
    for path in PAGES:
        if path == "/robots.txt":
            continue
        expected = 0 if path.startswith("/private/") else 1
        assert origin.hits.count(f"{host_of(path)}{path}") == expected, (path, origin.hits)
    assert not any(hit.startswith(BLOCKED_HOST) for hit in origin.hits)
    robots = [h for h in origin.hits if h.endswith("/robots.txt") and "robots-txt" not in h]
    assert len(robots) == len(set(robots)), sorted(robots)  # one robots.txt per host
    # The learned lists carry the evidence, and `learn show` says why.
    tree = tmp_path / "state" / "learned"
    gambling = (tree / "block" / "gambling" / "urls").read_text("utf-8")
    assert f"{host_of('/en/casino.html')}/en/casino.html" in gambling
    assert '"<online casino>"x' in gambling and "sha256=" in gambling
    assert f"{host_of('/en/clean.html')}/en/clean.html" in (
        tree / "allow" / "clean" / "urls"
    ).read_text("utf-8")


def test_review_and_overrides_survive_relearning(
    tmp_path: Path, origin: Origin, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_config(tmp_path, origin)
    casino = f"http://{host_of('/en/casino.html')}:{origin.port}/en/casino.html"
    clean = f"http://{host_of('/en/clean.html')}:{origin.port}/en/clean.html"
    offer(conf, [casino, clean])
    assert learn(conf, "run", "--until-idle") == 0
    capsys.readouterr()
    assert learn(conf, "show", casino) == 0
    shown = capsys.readouterr().out
    assert "block (gambling), by learned" in shown and "online casino" in shown
    assert learn(conf, "allow", casino, "--note", "our own site") == 0
    assert learn(conf, "block", clean, "--category", "reviewed") == 0
    rules = filter_loader(load_config(str(conf)))()
    assert rules.check(casino).action == "allow"
    assert (rules.check(clean).action, rules.check(clean).category) == ("block", "reviewed")
    # Re-learning (the queue's re-check age passed) does not undo an override.
    queue = open_queue(f"sqlite:{tmp_path / 'state' / 'queue.db'}?recheck=0")
    assert queue.offer([Sighting(casino)]) == 1
    queue.close()
    before = origin.fetched("/en/casino.html")
    assert learn(conf, "run", "--until-idle") == 0
    assert origin.fetched("/en/casino.html") == before + 1  # learned again
    rules = filter_loader(load_config(str(conf)))()
    assert rules.check(casino).action == "allow"
    capsys.readouterr()
    assert learn(conf, "list", "--source", "override") == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and all("\toverride\t" in line for line in listed)
    assert learn(conf, "forget", casino) == 0
    rules = filter_loader(load_config(str(conf)))()
    assert rules.check(casino).action == "none"
    assert learn(conf, "stats") == 0
    assert "verdicts:" in capsys.readouterr().out


def test_a_host_is_promoted_when_enough_pages_agree(tmp_path: Path, origin: Origin) -> None:
    conf = write_config(tmp_path, origin, promote_after=3)
    paths = ["/en/casino.html", "/zh/utf8-casino.html", "/zh/gbk-header.html"]
    offer(conf, [f"http://promo.test:{origin.port}{p}" for p in paths])
    assert learn(conf, "run", "--until-idle") == 0
    rules = filter_loader(load_config(str(conf)))()
    verdict = rules.check(f"http://promo.test:{origin.port}/never/seen.html")
    assert (verdict.action, verdict.category) == ("block", "gambling")
    assert verdict.rule is not None and verdict.rule.where.endswith("gambling/domains:2")


def test_a_job_is_finished_only_once_its_verdict_is_stored(tmp_path: Path, origin: Origin) -> None:
    conf = write_config(tmp_path, origin)
    conf.write_text(
        conf.read_text("utf-8").replace("batch = 16", "batch = 16\nlease_seconds = 1"), "utf-8"
    )
    paths = ["/en/casino.html", "/en/clean.html", "/zh/gbk-meta.html"]
    urls = [f"http://{host_of(p)}:{origin.port}{p}" for p in paths]
    offer(conf, urls)
    assert learn(conf, "run", "--crawl-only", "--until-idle") == 0  # fetched, spooled
    queue = open_queue(f"sqlite:{tmp_path / 'state' / 'queue.db'}")
    assert queue.stats().leased == 3  # no verdict yet: still leased, not done
    queue.close()
    shutil.rmtree(tmp_path / "state" / "spool")  # the learner's machine is lost
    time.sleep(1.2)  # the leases run out
    assert learn(conf, "run", "--until-idle") == 0
    rules = filter_loader(load_config(str(conf)))()
    assert [rules.check(u).action for u in urls] == ["block", "allow", "block"]
    for path in paths:  # fetched again by the second learner: nothing lost
        assert origin.hits.count(f"{host_of(path)}{path}") == 2
    queue = open_queue(f"sqlite:{tmp_path / 'state' / 'queue.db'}")
    stats = queue.stats()
    queue.close()
    assert (stats.leased, stats.waiting, stats.done) == (0, 0, 3)


def test_a_refused_target_is_logged_with_the_setting_that_would_allow_it(
    tmp_path: Path, origin: Origin, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_config(tmp_path, origin)
    offer(conf, ["http://10.0.0.1/admin", f"http://93.184.216.34:{origin.port}/x"])
    assert learn(conf, "run", "--until-idle") == 0
    err = capsys.readouterr().err
    assert "not fetched 'http://10.0.0.1/admin': 10.0.0.1 is private" in err, err
    assert "learn.crawl.allow_networks" in err
    assert f"93.184.216.34:{origin.port}: the crawler fetches only ports" in err
    assert "learn.crawl.ports" in err
    assert "2 refused" in err
