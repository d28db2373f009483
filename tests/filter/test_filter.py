"""``urlsieve.Filter``: precedence in both directions, verdicts, explain, loading lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from urlsieve import Filter, InvalidURL, Rule, RuleSyntaxError, parse_rule


def action(flt: Filter, url: str) -> str:
    return flt.check(url).action


def test_allowed_domain_with_a_blocked_path() -> None:
    flt = Filter.from_rules(["@@example.com", "example.com/bad/"])
    assert action(flt, "http://example.com/") == "allow"
    assert action(flt, "http://www.example.com/good") == "allow"
    assert action(flt, "http://example.com/bad/") == "block"
    assert action(flt, "http://www.example.com/bad/x") == "block"
    assert action(flt, "http://example.com/badx") == "allow"


def test_blocked_domain_with_an_allowed_path() -> None:
    flt = Filter.from_rules(["example.com", "@@example.com/public/"])
    assert action(flt, "http://example.com/") == "block"
    assert action(flt, "http://example.com/public/") == "allow"
    assert action(flt, "http://cdn.example.com/public/a.css") == "allow"
    assert action(flt, "http://example.com/publicx") == "block"


def test_longer_host_beats_longer_path() -> None:
    flt = Filter.from_rules(["example.com/a/b/c/", "@@www.example.com"])
    assert action(flt, "http://www.example.com/a/b/c/d") == "allow"
    assert action(flt, "http://example.com/a/b/c/d") == "block"
    flt = Filter.from_rules(["@@example.com/a/b/c/", "www.example.com"])
    assert action(flt, "http://www.example.com/a/b/c/d") == "block"


def test_allow_wins_an_exact_tie_whatever_the_order() -> None:
    for rules in (["example.com/x", "@@example.com/x"], ["@@example.com/x", "example.com/x"]):
        flt = Filter.from_rules(rules)
        assert action(flt, "http://example.com/x") == "allow"
        assert len(flt) == 1


def test_anchored_exact_host_and_query_rules() -> None:
    flt = Filter.from_rules(
        ["=example.com", "example.org/ads|", "example.net/p?id=1", "@@example.net/p?id=2"]
    )
    assert action(flt, "http://example.com/anything") == "block"
    assert action(flt, "http://www.example.com/") == "none"
    assert action(flt, "http://example.org/ads") == "block"
    assert action(flt, "http://example.org/ads?x=1") == "block"
    assert action(flt, "http://example.org/ads/") == "none"
    assert action(flt, "http://example.org/ads/x") == "none"
    assert action(flt, "http://example.net/p?id=1") == "block"
    assert action(flt, "http://example.net/p?id=%31") == "block"  # query canonicalised too
    assert action(flt, "http://example.net/p?id=2") == "allow"
    assert action(flt, "http://example.net/p?id=3") == "none"
    assert action(flt, "http://example.net/p") == "none"


def test_exact_host_rule_beside_a_domain_rule() -> None:
    flt = Filter.from_rules(["example.com", "@@=example.com"])
    assert action(flt, "http://example.com/") == "allow"
    assert action(flt, "http://www.example.com/") == "block"


def test_verdict_carries_rule_category_and_canonical() -> None:
    rule = parse_rule("evil.com", "block", "malware", "lists/malware", 12)
    flt = Filter.from_rules([rule])
    verdict = flt.check("HTTP://WWW.Evil.COM:80/a/../b#x")
    assert verdict.action == "block"
    assert verdict.blocked and not verdict.allowed
    assert verdict.rule == rule
    assert verdict.category == "malware"
    assert verdict.canonical == "http://www.evil.com/b"
    none = flt.check("http://good.com/")
    assert (none.action, none.rule, none.category) == ("none", None, None)
    assert [v.action for v in flt.check_many(["evil.com", "good.com"])] == ["block", "none"]


def test_invalid_url_raises() -> None:
    flt = Filter.from_rules(["evil.com"])
    with pytest.raises(InvalidURL):
        flt.check("javascript:alert(1)")


def test_from_rules_reports_bad_patterns() -> None:
    with pytest.raises(RuleSyntaxError, match="top-level domain"):
        Filter.from_rules(["com"])


def test_explain_shows_canonical_probes_and_rule() -> None:
    flt = Filter.from_rules(
        [
            parse_rule("example.com", "block", "ads", "ads.txt", 3),
            parse_rule("example.com/a/", "allow", "ok", "ok.txt", 9),
        ]
    )
    explanation = flt.explain("http://X.Example.com:80/a/b/c?q=1")
    assert explanation.canonical == "http://x.example.com/a/b/c?q=1"
    assert explanation.probes == [
        "x.example.com (no rules for this host)",
        "example.com/a/",
        "example.com/",  # probed too: the most specific rule of a host level wins
    ]
    assert explanation.rule is not None and explanation.rule.line == 9
    text = str(explanation)
    assert "decision:  allow by 'example.com/a/' (category ok, ok.txt:9)" in text
    missed = flt.explain("http://other.org/")
    assert missed.rule is None
    assert "none (no rule matches)" in str(missed)


def test_explain_lists_every_probe_most_specific_first() -> None:
    flt = Filter.from_rules(["example.com/a/b/", "example.com/a/b/c|", "example.com/x?y"])
    probes = flt.explain("http://example.com/a/b/c/d?z").probes
    # Only the path depths the host's rules have are probed (no rule has 4 "/").
    assert probes == [
        "example.com/a/b/c/d?z",
        "example.com/a/b/",
    ]


def test_from_lists_with_allow_lists_and_reports(tmp_path: Path) -> None:
    block = tmp_path / "blocked.txt"
    block.write_text("evil.com\nbad line here\n", "utf-8")
    allow = tmp_path / "ok.txt"
    allow.write_text("evil.com/help/\n", "utf-8")
    flt = Filter.from_lists([block], [allow])
    assert action(flt, "http://evil.com/") == "block"
    assert action(flt, "http://evil.com/help/x") == "allow"
    assert flt.check("http://evil.com/").category == "blocked"
    assert [r.loaded for r in flt.reports] == [1, 1]
    assert [str(w) for w in flt.warnings] == [
        f"{block}:2: whitespace inside a pattern: 'bad line here'"
    ]
    assert all(isinstance(r, Rule) for r in flt.rules)
    with pytest.raises(RuleSyntaxError, match=r"blocked\.txt:2"):
        Filter.from_lists([block], strict=True)


def test_bundled_sample_lists_block_the_sample_evasions() -> None:
    root = Path(__file__).resolve().parents[2] / "src" / "urlsieve" / "data"
    # "allowed" is a white-usage category: an allow list where named as one.
    flt = Filter.from_lists([root / "sample-lists"], [root / "sample-lists" / "allowed"])
    assert flt.warnings == []
    expected = {
        "HTTP://WWW.Example-Tracker.TEST:80/./banner.js#x": ("block", "ads"),
        "http://%63asino-royal.test/jackpot": ("block", "gambling"),
        "http://0300.0250.01.01/admin": ("block", "remote-admin"),
        "http://evil.test\\@good.test/": ("block", "phishing"),
        "http://evil.test/malware/%2e%2e/malware/payload.exe": ("block", "malware"),
        "http://evil.test/malware-free/readme": ("allow", "allowed"),
        "http://WWW.ÜMLAUT-shop.test/angebot": ("block", "shopping"),
        "http://user@casino-royal.test.@example.org/": ("none", None),
    }
    for url, (act, category) in expected.items():
        verdict = flt.check(url)
        assert (verdict.action, verdict.category) == (act, category), url
    sample = (root / "sample-urls.txt").read_text("utf-8").splitlines()
    assert set(expected) <= set(sample)


def test_save_writes_the_compiled_image_and_a_reference_engine_has_none(tmp_path: Path) -> None:
    from urlsieve.match import HashMatcher

    rules = [parse_rule("evil.example/x", "block", "c"), parse_rule("ok.example", "allow", "c")]
    flt = Filter(rules)
    info = flt.save(tmp_path / "r.snap")
    assert info.rules == 2
    assert (tmp_path / "r.snap").read_bytes() == flt.matcher.image  # type: ignore[attr-defined]
    loaded = Filter.load(tmp_path / "r.snap")
    assert loaded.check("http://evil.example/x/y").action == "block"
    loaded.close()
    with pytest.raises(TypeError, match="no compiled image"):
        Filter(HashMatcher(rules)).save(tmp_path / "h.snap")
    assert not (tmp_path / "h.snap").exists()
