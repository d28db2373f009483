"""List formats: every line counted, bad lines reported as ``source:line: reason``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from urlsieve import RuleSyntaxError
from urlsieve.rules import ALLOW, BLOCK, ListReport, load_lists, sniff_format


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")
    return path


def assert_accounted(report: ListReport) -> None:
    total = report.rule_lines + report.comments + report.ignored + report.skipped
    assert total == report.lines, report.summary()
    assert report.loaded + report.duplicates >= report.rule_lines
    assert len(report.warnings) == report.skipped


def test_plain_list(tmp_path: Path) -> None:
    path = write(
        tmp_path / "ads.txt",
        "\ufeff# header\n\nevil.com\n@@good.evil.com\nevil.com  # dup with comment\n"
        "bad host.com\nexample.org/p/\r\n",
    )
    result = load_lists([path])
    [report] = result.reports
    assert_accounted(report)
    assert (report.format, report.category, report.action) == ("plain", "ads", BLOCK)
    assert (report.lines, report.loaded, report.duplicates, report.comments, report.skipped) == (
        7,
        3,
        1,
        2,
        1,
    )
    assert [r.pattern for r in result.rules] == ["evil.com", "good.evil.com", "example.org/p/"]
    assert [r.action for r in result.rules] == [BLOCK, ALLOW, BLOCK]
    assert [r.line for r in result.rules] == [3, 4, 7]
    assert str(report.warnings[0]) == f"{path}:6: whitespace inside a pattern: 'bad host.com'"


def test_strict_mode_raises_at_the_first_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path / "l.txt", "ok.com\ncom\nbad host\n")
    with pytest.raises(RuleSyntaxError, match=r"l\.txt:2: .*top-level domain"):
        load_lists([path], strict=True)


def test_hosts_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / "hosts",
        "# hosts\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n0.0.0.0 0.0.0.0\n"
        "0.0.0.0 ads.example.com  \r\n127.0.0.1\tA.example.net b.example.net # two\n"
        "bare.example.org\nnot-an-ip host.example\n0.0.0.0 bad_%_host\n",
    )
    result = load_lists([path])
    [report] = result.reports
    assert report.format == "hosts"
    assert_accounted(report)
    assert [r.host for r in result.rules] == [
        "ads.example.com",
        "a.example.net",
        "b.example.net",
        "bare.example.org",
    ]
    assert (report.ignored, report.skipped, report.comments) == (3, 2, 1)
    assert "is not an address" in str(report.warnings[0])
    assert f"{path}:9: " in str(report.warnings[1])


def test_adblock_network_subset(tmp_path: Path) -> None:
    path = write(
        tmp_path / "filters.txt",
        "[Adblock Plus 2.0]\n! comment\n||ads.example.com^\n||example.com/path^$all\n"
        "@@||example.com/path/ok^\nbare.example.net\n||x.example.org/a$third-party\n"
        "example.com##.banner\n/banner[0-9]+/\n||*.example.org^\n||q.example.com/s/?id=1$all\n",
    )
    result = load_lists([path])
    [report] = result.reports
    assert report.format == "adblock"
    assert_accounted(report)
    assert [(r.location, r.action) for r in result.rules] == [
        ("ads.example.com/", BLOCK),
        ("example.com/path", BLOCK),
        ("example.com/path/ok", ALLOW),
        ("bare.example.net/", BLOCK),
        ("q.example.com/s/?id=1", BLOCK),
    ]
    reasons = [w.reason for w in report.warnings]
    assert len(reasons) == 4
    assert "unsupported option(s) $third-party" in reasons[0]
    assert "cosmetic" in reasons[1]
    assert "only '||host…' rules" in reasons[2]
    assert "wildcards" in reasons[3]


def test_csv_feed_with_url_column_and_unquoted_commas(tmp_path: Path) -> None:
    path = write(
        tmp_path / "feed.csv",
        "id,URL,status\n1,http://evil.example/a.exe,online\n2,http://x.example/a,b,c,offline\n"
        '3,"http://q.example/p?x=1,2",online\n4,,online\n',
    )
    result = load_lists([path])
    [report] = result.reports
    assert report.format == "csv"
    assert_accounted(report)
    assert [r.location for r in result.rules] == [
        "evil.example/a.exe",
        "x.example/a,b,c",
        "q.example/p?x=1,2",
    ]
    assert report.skipped == 1
    assert str(report.warnings[0]) == f"{path}:5: empty URL column"


def test_sniffing() -> None:
    assert sniff_format("x.csv", []) == "csv"
    assert sniff_format("x", ["! Title\n"]) == "adblock"
    assert sniff_format("x", ["# c\n", "||a.com^\n"]) == "adblock"
    assert sniff_format("x", ["# c\n", "0.0.0.0 a.com\n"]) == "hosts"
    assert sniff_format("x", ["# c\n", "a.com\n"]) == "plain"


def make_tree(root: Path) -> Path:
    write(root / "publicite" / "domains", "ads.example\ntracker.example\n")
    write(root / "publicite" / "urls", "www.example.org/ads/\nweb2.example.net/b\nweb.de/x\n")
    write(root / "publicite" / "expressions", "(banner|sponsor)\n")
    write(root / "publicite" / "usage", "black\npublicite\n")
    write(root / "liste_blanche" / "domains", "good.example\ngouv.fr\n")
    write(root / "liste_blanche" / "usage", "white\n")
    write(root / "malware" / "domains", "tracker.example\nmal.example\nmal.example/p\n")
    write(root / "chat" / "domains", "chat.example\n")
    write(root / "chat" / "usage", "black\nwhite\n")  # UT1: usable either way
    (root / "ads").symlink_to("publicite")
    write(root / "pub", "publicite")  # what git writes for a symlink without symlink support
    write(root / "README", "")
    return root


def test_squidguard_tree(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "bl")
    result = load_lists([root])
    assert result.aliases == {"ads": "publicite", "pub": "publicite"}
    by_file = {Path(r.source).relative_to(root).as_posix(): r for r in result.reports}
    # The white-usage category is an allow list: not read from a block tree, but reported.
    assert sorted(by_file) == [
        "chat/domains",
        "malware/domains",
        "publicite/domains",
        "publicite/expressions",
        "publicite/urls",
    ]
    assert result.skipped == [
        f"{root / 'liste_blanche'}: white-usage category skipped (an allow list): name it in "
        "--allow to allow it, or in --categories to block it"
    ]
    assert sorted(result.categories) == ["chat", "liste_blanche", "malware", "publicite"]
    for report in by_file.values():
        assert_accounted(report)
    assert by_file["chat/domains"].action == BLOCK
    assert by_file["malware/domains"].duplicates == 0  # same pattern, other category: not a dup
    assert by_file["malware/domains"].skipped == 1
    assert "paths belong in 'urls'" in by_file["malware/domains"].warnings[0].reason
    assert by_file["publicite/expressions"].skipped == 1
    rules = {(r.category, r.location): r for r in result.rules}
    # www/web+digits dropped from urls entries, unless a public suffix would remain
    assert ("publicite", "example.org/ads/") in rules
    assert ("publicite", "example.net/b") in rules
    assert ("publicite", "web.de/x") in rules
    assert rules[("publicite", "example.org/ads/")].pattern == "www.example.org/ads/"
    allowed = load_lists([root / "liste_blanche"], action=ALLOW)
    assert {r.location: r.action for r in allowed.rules}["gouv.fr/"] == ALLOW
    selected = load_lists([root], categories=["ads", "liste_blanche"])
    assert sorted({r.category for r in selected.rules}) == ["liste_blanche", "publicite"]
    assert {r.action for r in selected.rules} == {BLOCK}


def test_tree_duplicates_across_categories_keep_the_first(tmp_path: Path) -> None:
    write(tmp_path / "a" / "domains", "x.example\n")
    write(tmp_path / "b" / "domains", "x.example\ny.example\n")
    result = load_lists([tmp_path])
    assert [(r.category, r.host) for r in result.rules] == [("a", "x.example"), ("b", "y.example")]
    assert result.reports[1].duplicates == 1


def test_single_category_directory_and_forced_action(tmp_path: Path) -> None:
    write(tmp_path / "games" / "domains", "game.example\n")
    result = load_lists([tmp_path / "games"], action=ALLOW)
    assert [(r.category, r.action) for r in result.rules] == [("games", ALLOW)]


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuleSyntaxError, match="no such list file"):
        load_lists([tmp_path / "nope.txt"])


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_unknown_format_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "l.txt", "a.example\n")
    with pytest.raises(ValueError, match="unknown list format"):
        load_lists([path], format="regex")
