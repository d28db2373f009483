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

from tests.learn.origin import ATTACK_PAGES, BLOCKED_HOST, PAGES, Origin, Route, origin_server
from urlsieve.cli import main
from urlsieve.config import learn_settings
from urlsieve.exceptions import ConfigError
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
        if route.expect == "-":  # never read (robots, not HTML, slow): unclassifiable
            assert (verdict.action, verdict.category) == ("block", "unclassifiable"), path
        elif route.expect == "redirect":
            assert (verdict.action, verdict.category) == ("block", "blocked"), path
        elif route.expect is None:
            assert (verdict.action, verdict.category) == ("allow", "clean"), (path, verdict)
        else:
            assert (verdict.action, verdict.category) == ("block", route.expect), (path, verdict)
    # Every page fetched once, a clean one twice (the second look, as the crawler: issue 30
    # item 5); the robots-disallowed one never; the blocked host never.
    for path, route in PAGES.items():
        if path == "/robots.txt":
            continue
        expected = 0 if path.startswith("/private/") else 2 if route.expect is None else 1
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
        # (the clean page twice by it: its second look; a --crawl-only learner has no
        # classifier, so it takes none)
        expected = 3 if path == "/en/clean.html" else 2
        assert origin.hits.count(f"{host_of(path)}{path}") == expected
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


#: Sites that hide from the crawler (issue 30, items 3 and 4): path on the site, and what the
#: verdict's reason says.
HIDING = {
    "disallow.test": ("/p", "(robots): robots.txt of disallow.test disallows"),
    "robots503.test": ("/p", "answered HTTP 503"),
    "notfound.test": ("/p", "(http-error): HTTP 404"),
    "binary.test": ("/p", "(not-html): Content-Type 'application/pdf'"),
    "chain.test": ("/r0", "(too-many-redirects)"),
}
HIDING_PAGES = {
    "disallow.test/robots.txt": Route(200, (), b"User-agent: *\nDisallow: /\n", None),
    "robots503.test/robots.txt": Route(503, (), b"", None),
    "binary.test/p": Route(200, (("Content-Type", "application/pdf"),), b"%PDF-1.4\n", None),
    "robots503.test/p": Route(200, (("Content-Type", "text/html"),), b"<p>x</p>", None),
    "disallow.test/p": Route(200, (("Content-Type", "text/html"),), b"<p>x</p>", None),
    **{f"/r{i}": Route(302, (("Location", f"/r{i + 1}"),), b"", None) for i in range(9)},
}


def test_a_site_the_crawler_cannot_read_gets_an_unclassifiable_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each way of hiding from the crawler used to leave the URL unknown, and allowed for
    ever: now it is blocked as unclassifiable, with the reason, in one learner round."""
    with origin_server(HIDING_PAGES) as served:
        conf = write_config(tmp_path, served)
        names = "".join(f'"{host}" = "127.0.0.1", ' for host in HIDING)
        conf.write_text(conf.read_text("utf-8").replace("hosts = {", "hosts = {" + names))
        urls = {host: f"http://{host}:{served.port}{path}" for host, (path, _) in HIDING.items()}
        offer(conf, list(urls.values()))
        started = time.monotonic()
        assert learn(conf, "run", "--until-idle") == 0
        assert time.monotonic() - started < 30
        rules = filter_loader(load_config(str(conf)))()
        for host, url in urls.items():
            verdict = rules.check(url)
            assert (verdict.action, verdict.category) == ("block", "unclassifiable"), host
        capsys.readouterr()
        for host, (_, reason) in HIDING.items():
            assert learn(conf, "show", urls[host]) == 0
            shown = capsys.readouterr().out
            assert "block (unclassifiable)" in shown and reason in shown, shown
        assert served.fetched("/p") == 2  # binary.test's, and robots503.test's never
        # Other pages of those sites are not decided by these verdicts (no promotion).
        assert rules.check(f"http://notfound.test:{served.port}/other").action == "none"
        # learn.unclassifiable = "allow": the administrator lets them through, knowingly.
        conf.write_text(
            conf.read_text("utf-8").replace("limit = 50", 'limit = 50\nunclassifiable = "allow"')
        )
        queue = open_queue(f"sqlite:{tmp_path / 'state' / 'queue.db'}?recheck=0")
        assert queue.offer([Sighting(urls["notfound.test"])]) == 1
        queue.close()
        assert learn(conf, "run", "--until-idle") == 0
        rules = filter_loader(load_config(str(conf)))()
        verdict = rules.check(urls["notfound.test"])
        assert (verdict.action, verdict.category) == ("allow", "unclassifiable")


#: A new site's subresources (issue 30): what each type is learned as.
SUBRESOURCES = {
    "/logo.png": ("image/png", "resource"),
    "/site.css": ("text/css; charset=utf-8", "resource"),
    "/app.js": ("application/javascript", "resource"),
    "/font.woff2": ("font/woff2", "resource"),
    "/blob": ("application/octet-stream", "unclassifiable"),
    "/doc.pdf": ("application/pdf", "unclassifiable"),
}


def test_a_new_sites_subresources_follow_its_pages_and_its_root_page_is_queued(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Images, style sheets, scripts and fonts are not unclassifiable: they are allowed
    while their site has no dirty page, and the site's root page is queued once so that
    the site gets judged; other unreadable types stay unclassifiable."""
    pages = {
        **{
            path: Route(200, (("Content-Type", ctype),), b"\x00\x01bytes", None)
            for path, (ctype, _) in SUBRESOURCES.items()
        },
        "dirty-site.test/": PAGES["/en/casino.html"],
        "clean-site.test/": PAGES["/en/clean.html"],
    }
    with origin_server(pages) as served:
        conf = write_config(tmp_path, served)
        names = '"dirty-site.test" = "127.0.0.1", "clean-site.test" = "127.0.0.1", '
        conf.write_text(conf.read_text("utf-8").replace("hosts = {", "hosts = {" + names))
        urls = {
            (site, path): f"http://{site}:{served.port}{path}"
            for site in ("dirty-site.test", "clean-site.test")
            for path in SUBRESOURCES
        }
        offer(conf, list(urls.values()))
        assert learn(conf, "run", "--until-idle") == 0
        # The root page of each site was queued by the learner and fetched, once.
        assert served.hits.count("dirty-site.test/") == 1, served.hits
        assert served.hits.count("clean-site.test/") == 2  # a clean page: the second look
        rules = filter_loader(load_config(str(conf)))()
        for (site, path), url in urls.items():
            got = rules.check(url)
            learned = SUBRESOURCES[path][1]
            if learned == "unclassifiable":
                assert (got.action, got.category) == ("block", "unclassifiable"), url
            elif site == "dirty-site.test":
                assert (got.action, got.category) == ("block", "gambling"), url
            else:
                assert (got.action, got.category) == ("allow", "resource"), url
        capsys.readouterr()
        assert learn(conf, "show", urls[("dirty-site.test", "/logo.png")]) == 0
        shown = capsys.readouterr().out
        assert "block (gambling)" in shown and "a resource; its site dirty-site.test" in shown
        assert learn(conf, "show", urls[("clean-site.test", "/site.css")]) == 0
        shown = capsys.readouterr().out
        assert "allow (resource)" in shown and "has no dirty page" in shown, shown
        # A resource of a site that has a page verdict queues no root page.
        offer(conf, [f"http://dirty-site.test:{served.port}/logo.png?v=2"])
        assert learn(conf, "run", "--until-idle") == 0
        assert served.hits.count("dirty-site.test/") == 1


def test_the_unclassifiable_setting_is_checked(tmp_path: Path) -> None:
    section = {"queue": "sqlite:q.db", "directory": "d", "overlay": "o.snap"}
    assert learn_settings(section, str(tmp_path / "g.toml")).unclassifiable == "block"
    allow = learn_settings({**section, "unclassifiable": "allow"}, str(tmp_path / "g.toml"))
    assert allow.unclassifiable == "allow"
    with pytest.raises(ConfigError, match="unclassifiable must be 'block' or 'allow'"):
        learn_settings({**section, "unclassifiable": "warn"}, str(tmp_path / "g.toml"))


def test_a_long_page_is_never_learned_clean_on_its_first_bytes(tmp_path: Path) -> None:
    """Issue 30 item 7, in the split learner: a ``--crawl-only`` learner has no classifier,
    so a page over ``max_bytes`` reaches the classifier cut: dirty words in what was kept
    block it; a clean cut page is ``unclassifiable`` (``too-large``), never clean. The
    one-process learner scans the whole page as it reads it."""
    with origin_server({**PAGES, **ATTACK_PAGES}) as served:
        conf = write_config(tmp_path, served)
        hosts = ("pad-2mb.test", "pad-head.test")
        text = conf.read_text("utf-8").replace(
            'hosts = {"', "hosts = {" + "".join(f'"{h}" = "127.0.0.1", ' for h in hosts) + '"'
        )
        conf.write_text(text, "utf-8")
        late = f"http://pad-2mb.test:{served.port}/pad/2mb.html"  # dirty after 2 MB
        huge = f"http://pad-head.test:{served.port}/huge.html"  # dirty in its first bytes
        offer(conf, [late, huge])
        assert learn(conf, "run", "--crawl-only", "--until-idle") == 0
        assert learn(conf, "run", "--classify-only", "--until-idle") == 0
        rules = filter_loader(load_config(str(conf)))()
        assert (rules.check(late).action, rules.check(late).category) == (
            "block",
            "unclassifiable",
        )
        assert (rules.check(huge).action, rules.check(huge).category) == ("block", "gambling")
        # The same page, learned by one process, is read whole: its words are found.
        main(["learn", "--config", str(conf), "forget", late])
        offer(conf, [late + "?again=1"])
        assert learn(conf, "run", "--until-idle") == 0
        rules = filter_loader(load_config(str(conf)))()
        again = rules.check(late + "?again=1")
        assert (again.action, again.category) == ("block", "gambling")
