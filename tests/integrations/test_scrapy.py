"""Scrapy integration: the fingerprinter in-process, the duplicate filter in a real crawl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from scrapy import Request
from scrapy.settings import Settings

from urlsieve import ConfigError, Filter
from urlsieve.integrations.scrapy import UrlsieveDupeFilter, UrlsieveFingerprinter, store_spec
from urlsieve.seen import BACKENDS, open_seen
from urlsieve.url import FILTER

CRAWL = Path(__file__).with_name("crawl_site.py")
ROOT = Path(__file__).resolve().parents[2]

# Every page is linked in several spellings that are one URL once canonicalised.
PAGES = {
    "index.html": """
        <a href="a.html">a</a> <a href="/a.html">a</a> <a href="./a.html#top">a</a>
        <a href="/x/../a.html">a</a> <a href="/%61.html">a</a> <a href="//{host}/a.html">a</a>
        <a href="HTTP://{HOST}/a.html">a</a>
        <a href="b.html?y=2&x=1">b</a> <a href="b.html?x=1&y=2">b</a>
        <a href="/b.html?x=1&y=2&utm_source=news">b</a>
    """,
    "a.html": """<a href="c.html">c</a> <a href="/./c.html">c</a> <a href="/">home</a>
                 <a href="http://{host}">home</a> <a href="./">home</a>""",
    "b.html": """<a href="/c.html#x">c</a> <a href="//{host}//c.html">c</a>
                 <a href="a.html">a</a>""",
    "c.html": """<a href="/index.html?utm_medium=x">index, another URL</a> <a href="/">home</a>""",
}
DISTINCT = {"/", "/a.html", "/b.html", "/c.html", "/index.html"}


class _Site(ThreadingHTTPServer):
    requests: list[str]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[_Site]:
    root = tmp_path / "site"
    root.mkdir()
    server: _Site

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            server.requests.append(self.path)
            super().do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = _Site(("127.0.0.1", 0), Handler)
    server.requests = []
    host = f"127.0.0.1:{server.server_address[1]}"
    for name, html in PAGES.items():
        body = html.replace("{host}", host).replace("{HOST}", host.upper())
        (root / name).write_text(f"<html><body>{body}</body></html>")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def crawl(
    server: _Site,
    jobdir: Path,
    spec: str | None,
    rules: Path | None = None,
    policy: Path | None = None,
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    args = [sys.executable, "-W", "error::DeprecationWarning", str(CRAWL), url, str(jobdir)]
    args += [spec] if spec else []
    env = {**os.environ, "CRAWL_RULES": str(rules)} if rules else None
    if policy:
        env = {**os.environ, "CRAWL_POLICY": str(policy)}
    proc = subprocess.run(
        args, check=False, capture_output=True, text=True, cwd=ROOT, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    stats: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return stats


def page(path: str) -> str:
    return path.split("?", 1)[0].split("#", 1)[0].replace("%61", "a").replace("//", "/")


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec",
    [None, "bitmap:{jobdir}/seen.bitmap?width=24", "dsbf:{jobdir}/seen.dsbf?capacity=1000"],
    ids=["jobdir-default", "bitmap", "dsbf"],
)
def test_real_crawl_fetches_each_page_once_and_resumes_with_nothing(
    site: _Site, tmp_path: Path, spec: str | None
) -> None:
    jobdir = tmp_path / "job"
    first = crawl(site, jobdir, spec)
    fetched = [page(p) for p in site.requests]
    assert sorted(fetched) == sorted(DISTINCT), site.requests  # each page exactly once
    assert first["downloader/request_count"] == len(DISTINCT)
    assert first["dupefilter/filtered"] >= 10  # the other spellings were filtered
    assert first["urlsieve/seen_count"] == len(DISTINCT)

    site.requests.clear()
    second = crawl(site, jobdir, spec)
    assert site.requests == []  # a resumed job with the same JOBDIR fetches nothing new
    assert second.get("downloader/request_count", 0) == 0
    assert second["dupefilter/filtered"] == 1  # the start URL, remembered in the JOBDIR


def test_store_spec_precedence() -> None:
    assert store_spec(Settings()) == "memory:"
    default = store_spec(Settings({"JOBDIR": "/j"}))
    assert default == (
        "exact:/j/urlsieve.exact" if "exact" in BACKENDS else "buckets:/j/urlsieve.buckets"
    )
    explicit = Settings({"JOBDIR": "/j", "URLSIEVE_SEEN_STORE": "dsbf:{jobdir}/s?capacity=5"})
    assert store_spec(explicit) == "dsbf:/j/s?capacity=5"
    with pytest.raises(ConfigError, match="JOBDIR is not set"):
        store_spec(Settings({"URLSIEVE_SEEN_STORE": "bitmap:{jobdir}/x"}))


def test_fingerprints_are_bytes_and_equal_for_equal_requests() -> None:
    fp = UrlsieveFingerprinter().fingerprint
    a = fp(Request("http://Example.com/a/./b?y=2&x=1&utm_source=z#frag"))
    assert isinstance(a, bytes)
    assert len(a) == 16
    assert a == fp(Request("http://example.com/a/b?x=1&y=2"))
    assert a != fp(Request("http://example.com/a/b?x=1&y=3"))
    post = fp(Request("http://example.com/a/b?x=1&y=2", method="POST", body=b"q=1"))
    assert post not in (
        a,
        fp(Request("http://example.com/a/b?x=1&y=2", method="POST", body=b"q=2")),
    )
    assert fp(Request("data:text/plain,hello")) != fp(Request("data:text/plain,world"))
    # The filter profile keeps parameter order and tracking parameters.
    strict = UrlsieveFingerprinter(FILTER).fingerprint
    assert strict(Request("http://e.com/?b=1&a=2")) != strict(Request("http://e.com/?a=2&b=1"))


def test_dupefilter_keys_posts_by_body_and_never_filters_uncanonical_urls() -> None:
    df = UrlsieveDupeFilter(open_seen("memory:"))
    assert df.request_seen(Request("http://e.com/form", method="POST", body=b"a=1")) is False
    assert df.request_seen(Request("http://e.com/form", method="POST", body=b"a=2")) is False
    assert df.request_seen(Request("http://e.com/form#x", method="POST", body=b"a=1")) is True
    assert df.request_seen(Request("http://e.com/form")) is False  # the GET is another request
    assert df.request_seen(Request("HTTP://E.COM/form")) is True
    assert df.request_seen(Request("data:text/plain,x")) is False
    assert df.request_seen(Request("data:text/plain,x")) is False
    assert df.stats()["count"] == 3
    df.close("finished")


def test_close_flushes_the_store_before_closing_it() -> None:
    from urlsieve.seen import MemoryStore

    calls: list[str] = []

    class Recording(MemoryStore):
        def flush(self) -> None:
            calls.append("flush")

        def close(self) -> None:
            calls.append("close")
            super().close()

    dupefilter = UrlsieveDupeFilter(Recording(), flush_every=10_000)
    assert not dupefilter.request_seen(Request("http://a.example/"))
    dupefilter.close("finished")
    assert calls == ["flush", "close"]


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["lists", "snapshot"])
def test_real_crawl_skips_blocked_pages(site: _Site, tmp_path: Path, compiled: bool) -> None:
    from urlsieve.match.snapshot import compile_snapshot

    lists = tmp_path / "rules.txt"
    # b.html in any spelling, and a whole category of paths the site does not have
    lists.write_text("127.0.0.1/b.html|\n127.0.0.1/private/\n")
    rules = lists
    if compiled:
        rules = tmp_path / "rules.snap"
        compile_snapshot(Filter.from_lists([lists]).rules, rules)
    stats = crawl(site, tmp_path / "job", None, rules=rules)
    fetched = {page(p) for p in site.requests}
    assert fetched == DISTINCT - {"/b.html"}, site.requests
    assert stats["urlsieve/blocked"] >= 1
    assert stats["urlsieve/blocked/rules"] == stats["urlsieve/blocked"]


def test_middleware_drops_invalid_urls_only_when_asked() -> None:
    from scrapy.exceptions import IgnoreRequest

    from urlsieve.integrations.scrapy import UrlsieveFilterMiddleware

    rules = Filter.from_rules(["evil.example"])
    keep = UrlsieveFilterMiddleware(rules)
    assert keep.process_request(Request("http://good.example/")) is None
    assert keep.process_request(Request("data:text/plain,x")) is None
    with pytest.raises(IgnoreRequest, match=r"blocked by 'evil\.example'"):
        keep.process_request(Request("http://WWW.Evil.Example:80/x"))
    drop = UrlsieveFilterMiddleware(rules, drop_invalid=True)
    with pytest.raises(IgnoreRequest, match="cannot check"):
        drop.process_request(Request("data:text/plain,x"))


POLICY = """
[[dest]]
name = "pages"
urllist = "pages.urls"

[[source]]
name = "this-spider"
user = ["site"]

[[acl]]
source = "this-spider"
pass = ["!pages", "all"]

[[acl]]
source = "default"
pass = ["all"]
"""


@pytest.mark.slow
def test_real_crawl_decided_by_a_policy_for_its_spider(site: _Site, tmp_path: Path) -> None:
    """The spider's name is the user a policy source names: its ACL blocks b.html."""
    (tmp_path / "pages.urls").write_text("127.0.0.1/b.html\n")
    policy = tmp_path / "urlsieve.toml"
    policy.write_text(POLICY)
    stats = crawl(site, tmp_path / "job", None, policy=policy)
    fetched = {page(p) for p in site.requests}
    assert fetched == DISTINCT - {"/b.html"}, site.requests
    assert stats["urlsieve/blocked/pages"] >= 1
    assert stats["urlsieve/policy/this-spider/this-spider/block"] >= 1


def test_policy_middleware_who_asks_and_rewrites(tmp_path: Path) -> None:
    from scrapy import Spider
    from scrapy.exceptions import IgnoreRequest

    from urlsieve.gateway.config import load_config
    from urlsieve.gateway.ruleset import policy_loader
    from urlsieve.integrations.scrapy import UrlsieveFilterMiddleware

    (tmp_path / "pages.urls").write_text("example.org/private/\n")
    policy = tmp_path / "urlsieve.toml"
    policy.write_text(
        POLICY.replace('user = ["site"]', 'user = ["site", "alice"]')
        + '\n[[rewrite]]\nname = "https"\nsubstitutions = ["s@^http://plain\\\\.example/@https://plain.example/@"]\n'
    )
    text = policy.read_text().replace(
        'source = "default"\npass = ["all"]',
        'source = "default"\npass = ["all"]\nrewrite = "https"',
    )
    policy.write_text(text)
    load = policy_loader(load_config(str(policy), needs_rules=False))
    assert load is not None
    engine = load()
    mw = UrlsieveFilterMiddleware(engine.rules, policy=engine)
    spider = Spider(name="site")
    with pytest.raises(IgnoreRequest, match="pages"):
        mw.process_request(Request("http://example.org/private/x"), spider)
    other = Spider(name="other")
    assert mw.process_request(Request("http://example.org/private/x"), other) is None
    blocked = Request("http://example.org/private/x", meta={"urlsieve_user": "ALICE"})
    with pytest.raises(IgnoreRequest):
        mw.process_request(blocked, other)
    rewritten = mw.process_request(Request("http://plain.example/a"), other)
    assert rewritten is not None and rewritten.url == "https://plain.example/a"
    assert mw.process_request(rewritten, other) is None  # never rewritten twice


def test_policy_middleware_treats_a_warning_as_a_block(tmp_path: Path) -> None:
    from scrapy import Spider
    from scrapy.exceptions import IgnoreRequest

    from urlsieve.gateway.config import load_config
    from urlsieve.gateway.ruleset import policy_loader
    from urlsieve.integrations.scrapy import UrlsieveFilterMiddleware

    (tmp_path / "pages.urls").write_text("example.org/private/\n")
    policy = tmp_path / "urlsieve.toml"
    policy.write_text(
        '[policy]\nwarn_store = "memory:"\nwarn_page = "http://warn.test/?u=%u"\n'
        + POLICY.replace('pass = ["!pages", "all"]', 'pass = ["?pages", "all"]')
    )
    load = policy_loader(load_config(str(policy), needs_rules=False))
    assert load is not None
    engine = load()
    mw = UrlsieveFilterMiddleware(engine.rules, policy=engine)
    with pytest.raises(IgnoreRequest, match="pages"):
        mw.process_request(Request("http://example.org/private/x"), Spider(name="site"))


@pytest.mark.parametrize("spec", ["exact:{tmp}/s.exact", "bloom:{tmp}/s.bloom", "memory:"])
@pytest.mark.parametrize("batch", [1, 7])
def test_dupefilter_batches_its_writes_and_answers_at_once(
    tmp_path: Path, spec: str, batch: int
) -> None:
    """A new URL is seen at once (in any spelling), reaches the store with its batch, and
    the batch in the making reaches it at close; a second filter on the store (a resumed
    crawl) sees everything the first one saw."""
    from urlsieve.url import CRAWLER

    spec = spec.replace("{tmp}", str(tmp_path))
    store = open_seen(spec, profile=CRAWLER)
    df = UrlsieveDupeFilter(store, batch=batch)
    urls = [f"http://a.example/p{i}?b=2&a=1&utm_source=x" for i in range(20)]
    for url in urls:
        assert not df.request_seen(Request(url))
        assert df.request_seen(Request(url.replace("?b=2&a=1", "?a=1&b=2")))
    written = sum(url in store for url in urls)
    if spec != "memory:":
        expected = 20 if batch == 1 else 14  # two batches of 7 written, 6 pending
        assert written == expected
        df.close("finished")
        with open_seen(spec, profile=CRAWLER) as again:
            resumed = UrlsieveDupeFilter(again, batch=batch)
            assert all(resumed.request_seen(Request(url)) for url in urls)
            assert not resumed.request_seen(Request("http://a.example/new"))
            assert len(again) == (21 if batch == 1 else 20)  # the new one: at once or pending
    else:
        assert written == 20
        df.close("finished")
