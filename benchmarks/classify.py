"""Classifier throughput: decode, extract, normalise, match and score, in MB of HTML/s.

Lists: every weighted, banned and exception list of E2Guardian's ``ukenglish`` phrase
lists (``../shared/data/e2guardian-phraselists``, ~6k entries) plus a Chinese lexicon
built from its ``chinesegb2312``/``chinesebig5`` lists (decoded from their charsets into
a UTF-8 one-word-per-line file) and a few hundred common gambling words. Pages: generated
HTML of ~300 KB mixing English and Chinese paragraphs, markup, scripts and styles, a few
list phrases sprinkled in; UTF-8, GBK and Big5 bodies. One process, one core.

Run: ``.venv/bin/python -m benchmarks.classify [--runs 7] [--pages 12]``. Prints the
median MB/s, by the wall clock and by the process's CPU time (the steadier figure on a
machine shared with other work), and where the CPU time goes per step; writes nothing.

``--e2guardian`` (needs Debian's ``e2guardian``) adds, in the same run, a real E2Guardian
5.3 on loopback (the oracle fixture of ``tests/learn``):

* **evasion pages** (``tests/learn/test_evasion.py``: zero-width characters, look-alike
  letters, letter-spaced, dotted, dashed, all three) with the tests' phrase lists: E2Guardian's
  score of each page as served, E2Guardian's score of urlsieve's *normalised* text of it
  (served as a page), and urlsieve's score — urlsieve must score the normalised text as
  E2Guardian does;
* **throughput beside E2Guardian's** on the same pages with the same lists (the ukenglish
  weighted, banned and exception lists, no Chinese lexicon for either): the pages fetched
  one at a time through E2Guardian and directly from the same loopback origin; E2Guardian's
  MB/s end to end, and its content check's share (through it minus direct).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from urlsieve.learn.classify import Classifier
from urlsieve.learn.phrases import PhraseSet
from urlsieve.learn.text import decode, html_text, normalise

__all__ = ["main"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2guardian-phraselists"
_PHRASE = re.compile(r"<([^<>]+)>")

_EN = [
    "the",
    "council",
    "met",
    "on",
    "tuesday",
    "to",
    "discuss",
    "the",
    "new",
    "library",
    "budget",
    "and",
    "parking",
    "rules",
    "students",
    "will",
    "study",
    "history",
    "science",
    "and",
    "mathematics",
    "this",
    "term",
    "while",
    "the",
    "weather",
    "stays",
    "mild",
    "across",
    "the",
    "region",
    "and",
    "farmers",
    "prepare",
    "the",
    "fields",
    "for",
    "spring",
    "planting",
]
_ZH = "今天天气很好我们去公园散步学校老师布置了作业市民反映交通拥堵政府将改善公共服务"
_ZH_HOT = ["网上赌场", "百家乐", "六合彩", "博彩", "赌博"]


def _lists(tmp: Path) -> dict[str, list[Path] | list[tuple[Path, str, int]]]:
    english = DATA / "ukenglish"
    weighted = sorted(p for p in english.rglob("weighted*") if p.is_file())
    banned = sorted(p for p in english.rglob("banned*") if p.is_file())
    exception = sorted(p for p in english.rglob("exception*") if p.is_file())
    words: set[str] = set(_ZH_HOT)
    for folder, charset in (("chinesegb2312", "gb18030"), ("chinesebig5", "big5hkscs")):
        for path in (DATA / folder).rglob("*"):
            if path.is_file():
                text = path.read_bytes().decode(charset, "replace")
                words.update(m.strip() for m in _PHRASE.findall(text) if len(m.strip()) > 1)
    lexicon = tmp / "lexicon_zh.txt"
    lexicon.write_text("\n".join(sorted(w for w in words if not w.lstrip("-").isdigit())))
    return {
        "weighted": weighted,
        "banned": banned,
        "exception": exception,
        "lexicons": [(lexicon, "gambling", 20)],
    }


def _page(rng: random.Random, size: int) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Page</title>"
        "<style>body{margin:0} .nav a{color:#06c}</style>"
        "<script>window.dataLayer=[];function gtag(){dataLayer.push(arguments)}</script>"
        "</head><body><div class='nav'><a href='/'>Home</a> <a href='/news'>News</a></div>"
    ]
    length = sum(len(p) for p in parts)
    while length < size:
        if rng.random() < 0.5:
            words = [rng.choice(_EN) for _ in range(rng.randint(30, 90))]
            if rng.random() < 0.1:
                words.insert(rng.randrange(len(words)), "online casino")
            block = "<p class='text'>" + " ".join(words).capitalize() + ".</p>\n"
        else:
            chars = "".join(rng.choice(_ZH) for _ in range(rng.randint(40, 120)))
            if rng.random() < 0.1:
                chars += rng.choice(_ZH_HOT)
            block = (
                f"<div><span>{chars}</span>。<a href='/a/{rng.randint(1, 9999)}'>更多</a></div>\n"
            )
        parts.append(block)
        length += len(block)
    parts.append("</body></html>")
    return "".join(parts)


def _bodies(count: int, size: int) -> list[tuple[bytes, str]]:
    rng = random.Random(11)
    bodies = []
    for number in range(count):
        html = _page(rng, size)
        charset = ("utf-8", "utf-8", "gbk", "big5")[number % 4]
        body = html.replace("charset='utf-8'", f"charset='{charset}'").encode(charset, "replace")
        bodies.append((body, "text/html"))
    return bodies


def _run(classifier: Classifier, bodies: list[tuple[bytes, str]]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one pass over ``bodies``. The CPU time is what the
    goal (MB/s per core) means; the wall clock also counts time lost to other processes
    on a shared machine."""
    started, cpu = time.perf_counter(), time.process_time()
    for body, content_type in bodies:
        classifier.classify_body(body, content_type)
    return time.perf_counter() - started, time.process_time() - cpu


def _steps(classifier: Classifier, bodies: list[tuple[bytes, str]]) -> dict[str, float]:
    spent = dict.fromkeys(("decode", "html_text", "normalise", "match+score"), 0.0)
    for body, content_type in bodies:
        t0 = time.process_time()
        text, charset = decode(body, content_type)
        t1 = time.process_time()
        text = html_text(text)
        t2 = time.process_time()
        normalised = normalise(text)
        t3 = time.process_time()
        classifier._score(classifier._match(normalised), charset, len(normalised), False)
        t4 = time.process_time()
        for step, seconds in zip(spent, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[step] += seconds
    return spent


def _e2g_score(log: str, path: str) -> int | None:
    """E2Guardian's naughtiness score of the request for ``path`` (its access log's field
    after the reason; 0 for a page it let through)."""
    for line in reversed(log.splitlines()):
        fields = line.split("\t")
        if len(fields) > 16 and fields[5].endswith(path):
            return int(fields[16]) if fields[16].lstrip("-").isdigit() else 0
    return None


def _fetch(opener: urllib.request.OpenerDirector, url: str) -> bytes:
    try:
        with opener.open(url, timeout=60) as response:
            data: bytes = response.read()
    except urllib.error.HTTPError as exc:
        data = exc.read()
    return data


def _evasions(tmp: Path) -> None:
    from tests.learn.e2guardian import e2guardian_proxy
    from tests.learn.origin import PHRASES, Route, origin_server
    from tests.learn.test_evasion import EVASIONS, PLAIN, _page

    classifier = Classifier(
        PhraseSet.load(
            weighted=[PHRASES / "weightedphraselist"],
            banned=[PHRASES / "bannedphraselist"],
            exception=[PHRASES / "exceptionphraselist"],
        )
    )
    html = (("Content-Type", "text/html; charset=utf-8"),)
    pages = {"plain": _page(PLAIN), **{n: _page(f(PLAIN)) for n, f in EVASIONS.items()}}
    routes = {}
    for name, body in pages.items():
        routes[f"/{name}.html"] = Route(200, html, body, None)
        normalised = classifier.join_spaced(normalise(html_text(decode(body, html[0][1])[0])))
        routes[f"/{name}-normalised.html"] = Route(200, html, _page(normalised), None)
    with origin_server(routes) as origin, e2guardian_proxy(PHRASES, limit=50) as proxy:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.proxy}))
        for path in routes:
            _fetch(opener, f"http://127.0.0.1:{origin.port}{path}")
        time.sleep(2.0)  # the access log is written asynchronously
        log = proxy.log()
    print("evasion pages (tests' lists, limit 50): E2Guardian as served | E2Guardian on")
    print("urlsieve's normalised text | urlsieve")
    agree = 0
    for name, body in pages.items():
        served = _e2g_score(log, f"/{name}.html")
        on_normalised = _e2g_score(log, f"/{name}-normalised.html")
        ours = classifier.classify_body(body, html[0][1]).score
        agree += ours == on_normalised
        print(f"  {name:14} {served!s:>5} | {on_normalised!s:>5} | {ours:>5}")
    print(f"  urlsieve = E2Guardian on the normalised text: {agree} of {len(pages)} pages")


def _beside_e2guardian(bodies: list[tuple[bytes, str]], runs: int, tmp: Path) -> None:
    from tests.learn.e2guardian import e2guardian_proxy
    from tests.learn.origin import Route, origin_server

    english = DATA / "ukenglish"
    lists = tmp / "e2g-lists"
    lists.mkdir()
    files = {}
    for kind in ("weighted", "banned", "exception"):
        found = sorted(p for p in english.rglob(f"{kind}*") if p.is_file())
        files[kind] = found
        (lists / f"{kind}phraselist").write_text(
            "".join(f".Include<{p}>\n" for p in found), encoding="utf-8"
        )
    classifier = Classifier(
        PhraseSet.load(
            weighted=files["weighted"], banned=files["banned"], exception=files["exception"]
        )
    )
    routes = {
        f"/p{n}.html": Route(200, (("Content-Type", ctype),), body, None)
        for n, (body, ctype) in enumerate(bodies)
    }
    megabytes = sum(len(body) for body, _ in bodies) / 1e6
    with origin_server(routes) as origin, e2guardian_proxy(lists, limit=50) as proxy:
        through = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.proxy}))
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        urls = [f"http://127.0.0.1:{origin.port}{path}" for path in routes]
        rows: dict[str, list[float]] = {"e2guardian": [], "direct": [], "urlsieve": []}
        for _ in range(runs):
            for label, opener in (("e2guardian", through), ("direct", direct)):
                started = time.perf_counter()
                for url in urls:
                    _fetch(opener, url)
                rows[label].append(time.perf_counter() - started)
            rows["urlsieve"].append(_run(classifier, bodies)[0])
    e2g, plain, ours = (statistics.median(rows[k]) for k in ("e2guardian", "direct", "urlsieve"))
    print(f"beside E2Guardian (ukenglish lists for both, {len(bodies)} pages, {megabytes:.1f} MB,")
    print(f"median of {runs} runs, wall clock, pages one at a time):")
    print(f"  urlsieve classify_body:              {megabytes / ours:7.1f} MB/s")
    print(f"  E2Guardian, fetched through it:      {megabytes / e2g:7.1f} MB/s end to end")
    print(f"  the same pages fetched directly:     {megabytes / plain:7.1f} MB/s")
    if e2g > plain:
        print(f"  E2Guardian's share (through - direct): {megabytes / (e2g - plain):7.1f} MB/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--size", type=int, default=300_000, help="characters per page")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--e2guardian", action="store_true", help="also measure a real E2Guardian beside it"
    )
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        print(f"{DATA} is missing: this benchmark needs ../shared/data", file=sys.stderr)
        return 2
    from benchmarks._common import build

    print(f"build: {build()}")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        phrases = PhraseSet.load(**_lists(Path(tmp)))  # type: ignore[arg-type]
        loaded = time.perf_counter() - started
        classifier = Classifier(phrases)
    bodies = _bodies(args.pages, args.size)
    megabytes = sum(len(body) for body, _ in bodies) / 1e6
    blocked = sum(classifier.classify_body(b, c).blocked for b, c in bodies)
    print(
        f"lists: {len(phrases.phrases)} phrases, {len(phrases.errors)} list errors, "
        f"loaded + compiled in {loaded:.2f} s"
    )
    print(
        f"pages: {len(bodies)} x ~{args.size // 1000} KB = {megabytes:.1f} MB "
        f"(utf-8, gbk, big5); {blocked} blocked"
    )
    runs = [_run(classifier, bodies) for _ in range(args.runs)]
    for label, rates in (
        ("wall clock", [megabytes / wall for wall, _ in runs]),
        ("CPU time", [megabytes / cpu for _, cpu in runs]),
    ):
        print(
            f"end to end ({label}): median {statistics.median(rates):.1f} MB/s per core "
            f"(min {min(rates):.1f}, max {max(rates):.1f}, {args.runs} runs)"
        )
    spent = _steps(classifier, bodies)
    total = sum(spent.values())
    print(
        "where the time goes: "
        + ", ".join(
            f"{step} {100 * seconds / total:.0f}% ({megabytes / seconds:.0f} MB/s)"
            for step, seconds in spent.items()
        )
    )
    if args.e2guardian:
        with tempfile.TemporaryDirectory() as tmp:
            _evasions(Path(tmp))
            _beside_e2guardian(bodies, args.runs, Path(tmp))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        _run(classifier, bodies)
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
