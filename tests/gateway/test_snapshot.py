"""Compiled snapshots: round trip, refusal of bad files, atomic swap, and the same verdicts as
the production matcher (differential)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.gateway import rulegen
from urlsieve import Filter, InvalidURL, RuleSyntaxError, parse_url
from urlsieve.match import HashMatcher
from urlsieve.match.snapshot import (
    FORMAT_VERSION,
    SnapshotError,
    compile_snapshot,
    open_snapshot,
    read_snapshot_info,
)
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule

PATTERNS = [
    "evil.com",
    "@@evil.com/public/",
    "example.org/ads",
    "=exact.net",
    "q.com/p?id=1",
    "a.com/x|",
    "10.1.2.3",
    "xn--bcher-kva.example",
    "allowed.org",
    "allowed.org/bad/",
]


def make_rules(patterns: list[str], category: str = "test", categories: int = 0) -> list[Rule]:
    """Rules from patterns (``@@`` = allow); ``categories`` > 0 spreads them over c0, c1…"""
    rules = []
    for number, pattern in enumerate(patterns, 1):
        action = ALLOW if pattern.startswith("@@") else BLOCK
        text = pattern.removeprefix("@@")
        name = f"c{number % categories}" if categories else category
        try:
            rules.append(parse_rule(text, action, name, "gen.txt", number))
        except RuleSyntaxError:
            continue
    return rules


@pytest.fixture
def snap(tmp_path: Path) -> Path:
    path = tmp_path / "rules.snap"
    compile_snapshot(make_rules(PATTERNS), path)
    return path


@pytest.mark.parametrize(
    ("url", "action", "pattern"),
    [
        ("http://WWW.Evil.COM:80/x", "block", "evil.com"),
        ("http://evil.com/public/a.html", "allow", "evil.com/public/"),
        ("http://example.org/ads", "block", "example.org/ads"),
        ("http://m.example.org/ads/x?y=1", "block", "example.org/ads"),
        ("http://example.org/adsense", "none", None),
        ("http://www.exact.net/", "none", None),
        ("http://exact.net/any", "block", "=exact.net"),
        ("http://q.com/p?id=1", "block", "q.com/p?id=1"),
        ("http://q.com/p?id=2", "none", None),
        ("http://a.com/x?z", "block", "a.com/x|"),
        ("http://a.com/x/y", "none", None),
        ("http://0x0a.1.2.3/", "block", "10.1.2.3"),
        ("http://167838211/", "block", "10.1.2.3"),
        ("http://bücher.example/", "block", "xn--bcher-kva.example"),
        ("http://allowed.org/bad/x", "block", "allowed.org/bad/"),
        ("http://notevil.com/", "none", None),
        ("http://evil.com.example.org/", "none", None),
    ],
)
def test_verdicts_and_provenance(snap: Path, url: str, action: str, pattern: str | None) -> None:
    with open_snapshot(snap) as matcher:
        verdict = matcher.check(url)
    assert verdict.action == action
    assert (verdict.rule.pattern if verdict.rule else None) == pattern
    if verdict.rule is not None:
        assert verdict.rule.source == "gen.txt"
        assert verdict.rule.category == "test"
        written = [p.removeprefix("@@") for p in PATTERNS]
        assert verdict.rule.line == written.index(verdict.rule.pattern) + 1


def test_filter_load_is_a_filter(snap: Path) -> None:
    loaded = Filter.load(snap)
    assert isinstance(loaded, Filter)
    assert loaded.info is not None and loaded.info.path == str(snap)
    assert len(loaded) == len(make_rules(PATTERNS))
    assert loaded.check("http://evil.com/").blocked
    assert [v.action for v in loaded.check_many(["http://evil.com/", "http://x.org/"])] == [
        "block",
        "none",
    ]
    assert sorted(r.pattern for r in loaded.rules) == sorted(p.removeprefix("@@") for p in PATTERNS)
    with pytest.raises(InvalidURL):
        loaded.check("javascript:alert(1)")
    loaded.close()


def test_explain_lists_probes_and_rule(snap: Path) -> None:
    explanation = Filter.load(snap).explain("http://www.evil.com/a/b")
    assert explanation.canonical == "http://www.evil.com/a/b"
    assert explanation.rule is not None and explanation.rule.pattern == "evil.com"
    assert "evil.com/" in explanation.probes


def test_info_and_metadata(tmp_path: Path) -> None:
    path = tmp_path / "r.snap"
    info = compile_snapshot(make_rules(PATTERNS), path, meta={"lists": ["x"]})
    again = read_snapshot_info(path, verify=True)
    assert again.version == info.version
    assert again.format_version == FORMAT_VERSION
    assert again.rules == len(make_rules(PATTERNS))
    assert again.size == path.stat().st_size
    assert again.meta["lists"] == ["x"]
    assert again.meta["actions"] == {"allow": 1, "block": 9}


def test_version_is_a_content_id(tmp_path: Path) -> None:
    a = compile_snapshot(make_rules(PATTERNS), tmp_path / "a.snap")
    b = compile_snapshot(make_rules(PATTERNS), tmp_path / "b.snap")
    c = compile_snapshot(make_rules(PATTERNS[:-1]), tmp_path / "c.snap")
    assert a.version == b.version != c.version


def test_empty_rule_set(tmp_path: Path) -> None:
    compile_snapshot([], tmp_path / "e.snap")
    assert Filter.load(tmp_path / "e.snap").check("http://a.com/").action == "none"


# -- refusing bad files ------------------------------------------------------------------


def test_truncated_file_is_refused(snap: Path) -> None:
    data = snap.read_bytes()
    for size in (0, 10, 191, len(data) - 1):
        snap.write_bytes(data[:size])
        with pytest.raises(SnapshotError, match="truncated"):
            Filter.load(snap)


def test_corrupt_body_is_refused(snap: Path) -> None:
    data = bytearray(snap.read_bytes())
    data[-5] ^= 0xFF
    snap.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="body checksum"):
        Filter.load(snap)


def test_corrupt_header_is_refused(snap: Path) -> None:
    data = bytearray(snap.read_bytes())
    data[40] ^= 0x01  # inside the creation time
    snap.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="corrupt header"):
        Filter.load(snap)


def test_other_format_version_is_refused_with_the_fix(snap: Path) -> None:
    data = bytearray(snap.read_bytes())
    struct.pack_into("<I", data, 8, FORMAT_VERSION + 1)
    snap.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match=rf"format version {FORMAT_VERSION + 1}.*recompile"):
        Filter.load(snap)


def test_not_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "list.txt"
    path.write_text("evil.com\n" * 100)
    with pytest.raises(SnapshotError, match="not a urlsieve snapshot"):
        Filter.load(path)
    with pytest.raises(SnapshotError, match="cannot open"):
        Filter.load(tmp_path / "missing.snap")


# -- atomic swap -------------------------------------------------------------------------


def test_compile_replaces_atomically_and_open_mappings_keep_working(tmp_path: Path) -> None:
    path = tmp_path / "rules.snap"
    compile_snapshot(make_rules(["evil.com"]), path)
    old = Filter.load(path)
    inode = path.stat().st_ino
    compile_snapshot(make_rules(["other.com"]), path)
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert old.check("http://evil.com/").blocked  # the old mapping is intact
    new = Filter.load(path)
    assert new.check("http://other.com/").blocked
    assert not new.check("http://evil.com/").blocked
    assert [p.name for p in tmp_path.iterdir()] == ["rules.snap"]  # no temporary left


def test_failed_compile_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.snap"
    compile_snapshot(make_rules(["evil.com"]), path)
    before = path.read_bytes()

    def broken() -> list[Rule]:
        raise RuntimeError("lists vanished")

    with pytest.raises(RuntimeError):
        compile_snapshot(iter(broken()), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["rules.snap"]


# -- differential: same verdicts as the production matcher ------------------------------


def same_rule(a: Rule | None, b: Rule | None) -> bool:
    """Same rule: what it matches, its action and provenance. (The production matcher keeps
    host-wide rules compactly and rebuilds their pattern text from the host, so a written
    ``a.com/`` comes back as ``a.com``; the snapshot keeps the text as written.)"""
    if a is None or b is None:
        return a is b
    fields = ("key", "action", "category", "source", "line", "rank")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


@pytest.mark.parametrize(("n_rules", "seed"), [(150, 1), (300, 2), (450, 3), (600, 4)])
def test_same_verdicts_as_the_production_matcher(tmp_path: Path, n_rules: int, seed: int) -> None:
    rules = make_rules(rulegen.random_rules(n_rules, seed), categories=5)
    reference = Filter(HashMatcher(rules))
    compile_snapshot(rules, tmp_path / "d.snap")
    snapshot = Filter.load(tmp_path / "d.snap")
    actions = {"block": 0, "allow": 0, "none": 0}
    for url in rulegen.random_urls(6000, seed + 100):
        want, got = reference.check(url), snapshot.check(url)
        assert (got.action, got.canonical) == (want.action, want.canonical), url
        assert same_rule(got.rule, want.rule), url
        parsed = parse_url(url)
        assert same_rule(snapshot.match(parsed), reference.match(parsed)), url
        actions[want.action] += 1
    # The generated sets must exercise all three outcomes, or the test proves little.
    assert min(actions.values()) > 100, actions


def test_snapshot_of_the_sample_lists_matches(tmp_path: Path) -> None:
    lists = Path(__file__).resolve().parents[2] / "src" / "urlsieve" / "data" / "sample-lists"
    compiled = Filter.from_lists([lists])
    reference = Filter(HashMatcher(compiled.rules))
    compile_snapshot(compiled.rules, tmp_path / "s.snap")
    snapshot = Filter.load(tmp_path / "s.snap")
    urls = [f"http://{r.host}{r.path}" for r in reference.rules]
    urls += [f"http://www.{r.host}/x/y?z=1" for r in reference.rules]
    for url in urls:
        try:
            want = reference.check(url)
        except InvalidURL:
            continue
        assert snapshot.check(url) == want, url
    assert os.path.getsize(tmp_path / "s.snap") > 0
