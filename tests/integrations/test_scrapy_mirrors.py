"""Seed 004 in a real Scrapy crawl: several names on a loopback origin, resolved by real DNS.

One origin serves five host names on 127.0.0.1 and 127.0.0.2 (the names
resolve through dnsmasq, and Scrapy connects through urlsieve's resolver):

* ``www.orig.test`` (127.0.0.1): the original site, 12 linked pages;
* ``alias.orig.test`` (127.0.0.1): the same site under another name;
* ``copy.mirror.test`` (127.0.0.2): a mirror on another address, with its
  own boilerplate (another update date in the footer, other script values);
* ``other.shared.test`` (127.0.0.1): an unrelated site on the same address
  with the same paths (shared hosting);
* ``diff.site.test`` (127.0.0.2): another unrelated site.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.neardup.dns_fixtures import DnsServer
from urlsieve.neardup.simhash import hamming, simhash

CRAWL = Path(__file__).with_name("crawl_mirrors.py")
ROOT = Path(__file__).resolve().parents[2]
PAGES = 12
HOSTS = {
    "www.orig.test": "127.0.0.1",
    "alias.orig.test": "127.0.0.1",
    "copy.mirror.test": "127.0.0.2",
    "other.shared.test": "127.0.0.1",
    "diff.site.test": "127.0.0.2",
}


def _words(seed: int, n: int = 800) -> str:
    rnd = random.Random(seed)
    return " ".join(f"w{rnd.randrange(20000)}" for _ in range(n))


def _page(site: str, i: int) -> str:
    body = _words({"orig": 0, "mirror": 0, "other": 1000, "diff": 2000}[site] + i)
    footer = "last updated 2026-11-20"
    if site == "mirror":
        footer = "last updated 2026-11-23"  # the mirror's own sync date
    links = "".join(f'<a href="/p{j}">page {j}</a> ' for j in ((i + 1) % PAGES, (i + 5) % PAGES))
    return (
        f"<html><head><title>p{i}</title><style>.x{{}}</style>"
        f"<script>var t={random.Random(i).random()}</script></head>"
        f"<body><div>{body}</div><nav>{links}</nav><footer>{footer}</footer></body></html>"
    )


SITE_OF = {
    "www.orig.test": "orig",
    "alias.orig.test": "orig",
    "copy.mirror.test": "mirror",
    "other.shared.test": "other",
    "diff.site.test": "diff",
}


class _Origin:
    def __init__(self) -> None:
        self.requests: list[str] = []
        self.servers: list[ThreadingHTTPServer] = []
        self.threads: list[threading.Thread] = []
        self.port = 0


@pytest.fixture
def origin() -> Iterator[_Origin]:
    state = _Origin()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            path = urlsplit(self.path).path
            state.requests.append(f"{host}{path}")
            site = SITE_OF.get(host)
            if site is None or not path.startswith("/p") or not path[2:].isdigit():
                self.send_error(404)
                return
            data = _page(site, int(path[2:]) % PAGES).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    first = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = first.server_address[1]
    state.servers = [first, ThreadingHTTPServer(("127.0.0.2", state.port), Handler)]
    for server in state.servers:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        state.threads.append(thread)
    yield state
    for server in state.servers:
        server.shutdown()
        server.server_close()


def crawl(dns: DnsServer, origin: _Origin, settings: dict[str, Any]) -> dict[str, Any]:
    dns.set_hosts(HOSTS)
    starts = [f"http://{host}:{origin.port}/p0" for host in HOSTS]
    args = [sys.executable, str(CRAWL), dns.spec, json.dumps(settings), *starts]
    proc = subprocess.run(
        args, check=False, capture_output=True, text=True, cwd=ROOT, timeout=180, env=os.environ
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_the_site_is_what_the_test_says() -> None:
    for i in range(PAGES):
        orig = simhash(_page("orig", i).split("<div>")[1].split("</footer>")[0])
        mirror = simhash(_page("mirror", i).split("<div>")[1].split("</footer>")[0])
        other = simhash(_page("other", i).split("<div>")[1].split("</footer>")[0])
        assert hamming(orig, mirror) <= 3  # near-identical: boilerplate differs
        assert hamming(orig, other) > 10


@pytest.mark.slow
def test_mirrors_are_detected_and_not_fetched_twice(
    dns_server: DnsServer, origin: _Origin, tmp_path: Path
) -> None:
    report = tmp_path / "aliases.json"
    stats = crawl(dns_server, origin, {"URLSIEVE_ALIAS_REPORT": str(report)})
    per_host = Counter(r.split("/")[0] for r in origin.requests)
    # Unrelated sites are crawled in full, shared address or not.
    assert per_host["other.shared.test"] == PAGES
    assert per_host["diff.site.test"] == PAGES
    # The original is crawled in full; its alias and its mirror only until confirmed.
    assert per_host["www.orig.test"] == PAGES
    assert 3 <= per_host["alias.orig.test"] <= 4, per_host
    assert 3 <= per_host["copy.mirror.test"] <= 4, per_host
    assert len(origin.requests) == len(set(origin.requests))  # no page fetched twice
    assert stats["urlsieve/confirmed_aliases"] == 2
    assert stats["urlsieve/alias_candidates"] >= 3 + PAGES  # alias's and other's pages
    assert stats["urlsieve/aliases"] >= 1
    # Every decision is explained: which pages, which distances, against which thresholds.
    explained = json.loads(report.read_text())
    assert explained["aliases"] == {
        "alias.orig.test": "www.orig.test",
        "copy.mirror.test": "www.orig.test",
    }
    by_pair = {(d["host"], d["other"]): d for d in explained["decisions"]}
    mirror = by_pair[("copy.mirror.test", "www.orig.test")]
    assert mirror["confirmed"] and len(mirror["agree"]) == 3
    assert all(p["distance"] <= 3 for p in mirror["agree"])
    shared = by_pair[("other.shared.test", "www.orig.test")]
    assert not shared["confirmed"] and len(shared["disagree"]) >= 3
    assert ("diff.site.test", "www.orig.test") not in by_pair


@pytest.mark.slow
def test_near_duplicate_responses_are_dropped(dns_server: DnsServer, origin: _Origin) -> None:
    stats = crawl(dns_server, origin, {"URLSIEVE_DROP_NEAR_DUPLICATES": True})
    per_host = Counter(r.split("/")[0] for r in origin.requests)
    # The alias's and the mirror's start pages are near duplicates of www's: dropped, so
    # their links are never followed.
    assert per_host["alias.orig.test"] == 1
    assert per_host["copy.mirror.test"] == 1
    assert per_host["other.shared.test"] == per_host["diff.site.test"] == PAGES
    assert stats["urlsieve/near_duplicates"] == 2
    fetched = {urlsplit(u).hostname for u in stats["fetched"]}
    assert "alias.orig.test" not in fetched and "copy.mirror.test" not in fetched
