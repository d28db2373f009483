"""Choosing categories never loses a domain that another category lists too (a bypass)."""

from __future__ import annotations

from pathlib import Path

import pytest

from urlsieve import ConfigError, Filter
from urlsieve.gateway.config import load_config
from urlsieve.gateway.ruleset import compile_lists, filter_loader


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "bl"
    for category, domains in {
        "ads": "shared.com\nonlyads.com\n",  # read first: categories load in name order
        "porn": "shared.com\nonlyporn.com\n",
    }.items():
        (root / category).mkdir(parents=True)
        (root / category / "domains").write_text(domains)
    (root / "good").mkdir()
    (root / "good" / "domains").write_text("shared.com\n")
    (root / "good" / "usage").write_text("white\n")
    return root


def _actions(flt: Filter) -> dict[str, str]:
    return {
        host: flt.check(f"http://{host}/").action
        for host in ("shared.com", "onlyads.com", "onlyporn.com")
    }


def test_from_lists_selects_before_dropping_duplicates(tree: Path) -> None:
    (tree / "good" / "domains").write_text("")  # no allow rule in this test
    flt = Filter.from_lists([tree], categories=["porn"])
    assert _actions(flt) == {"shared.com": "block", "onlyads.com": "none", "onlyporn.com": "block"}
    assert flt.check("http://shared.com/").category == "porn"


def test_a_white_usage_category_in_a_block_tree_is_not_an_allow_list(tree: Path) -> None:
    # UT1's download/liste_bu: 41 malware domains are also in "download", and were allowed.
    flt = Filter.from_lists([tree])
    assert flt.check("http://shared.com/").action == "block"
    assert any("good: white-usage category skipped" in s for s in flt.skipped)
    assert "good" in flt.categories


def test_a_white_usage_category_allows_where_named_as_an_allow_list(tree: Path) -> None:
    flt = Filter.from_lists([tree], [tree / "good"])
    assert flt.check("http://shared.com/").action == "allow"
    assert flt.check("http://onlyads.com/").action == "block"


def test_a_category_named_as_a_block_list_blocks_whatever_its_usage(tree: Path) -> None:
    # "--lists ut1/download" means "block downloads".
    assert Filter.from_lists([tree / "good"]).check("http://shared.com/").action == "block"
    selected = Filter.from_lists([tree], categories=["good"])
    assert selected.check("http://shared.com/").category == "good"
    assert selected.check("http://shared.com/").action == "block"


def test_categories_restrict_allow_trees_too(tree: Path) -> None:
    flt = Filter.from_lists([], [tree], categories=["good"])
    assert flt.check("http://shared.com/").action == "allow"
    assert flt.check("http://onlyads.com/").action == "none"  # ads: not selected


@pytest.mark.parametrize("git_form", [False, True])
def test_an_alias_selects_its_target(tree: Path, git_form: bool) -> None:
    alias = tree / "adult"
    if git_form:  # git's symlink-as-text-file form, on checkouts without symlinks
        alias.write_text("porn")
    else:
        alias.symlink_to("porn")
    flt = Filter.from_lists([tree], categories=["adult"])
    assert _actions(flt) == {"shared.com": "block", "onlyads.com": "none", "onlyporn.com": "block"}
    assert flt.aliases == {"adult": "porn"}
    snap = tree.parent / "a.snap"
    compile_lists([str(tree)], [], str(snap), categories=["adult"])
    assert Filter.load(snap).check("http://onlyporn.com/").action == "block"


def test_a_selection_that_gives_no_rule_is_refused(tree: Path, tmp_path: Path) -> None:
    (tree / "regex").mkdir()
    (tree / "regex" / "urls").write_text("")
    (tree / "regex" / "expressions").write_text("(porn|sex)\n")
    with pytest.raises(ConfigError, match=r"selected categories \(regex\) give no rule"):
        compile_lists([str(tree)], [], str(tmp_path / "x.snap"), categories=["regex"])


def test_compiled_snapshot_keeps_shared_domains(tree: Path, tmp_path: Path) -> None:
    (tree / "good" / "domains").write_text("")
    snap = tmp_path / "rules.snap"
    compile_lists([str(tree)], [], str(snap), categories=["porn"])
    assert _actions(Filter.load(snap)) == {
        "shared.com": "block",
        "onlyads.com": "none",
        "onlyporn.com": "block",
    }
    with pytest.raises(ConfigError, match="categories not found in the lists: nosuch"):
        compile_lists([str(tree)], [], str(snap), categories=["nosuch"])


def test_lists_loader_of_the_gateway_keeps_shared_domains(tree: Path, tmp_path: Path) -> None:
    (tree / "good" / "domains").write_text("")
    cfg = tmp_path / "urlsieve.toml"
    cfg.write_text(f'[rules]\nlists = ["{tree}"]\ncategories = ["porn"]\n')
    flt = filter_loader(load_config(str(cfg), env={}))()
    assert _actions(flt)["shared.com"] == "block"


def test_config_check_prints_what_each_category_gives_and_refuses_none(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from urlsieve.cli import main

    (tree / "adult").symlink_to("porn")
    cfg = tmp_path / "urlsieve.toml"
    cfg.write_text(f'[rules]\nlists = ["{tree}"]\ncategories = ["adult", "ads"]\n')
    assert main(["config", "check", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert (
        "category adult (alias of porn): 2 block rules (1 also in another category), 0 allow rules"
        in out
    )
    assert "category ads: 2 block rules, 0 allow rules" in out
    cfg.write_text(f'[rules]\nlists = ["{tree}"]\ncategories = ["nosuch"]\n')
    assert main(["config", "check", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "categories not found in the lists: nosuch" in err and "porn" in err
    (tree / "empty").mkdir()
    (tree / "empty" / "domains").write_text("# nothing yet\n")
    cfg.write_text(f'[rules]\nlists = ["{tree}"]\ncategories = ["empty"]\n')
    assert main(["config", "check", str(cfg)]) == 2
    assert "give no rule" in capsys.readouterr().err


def test_check_takes_categories_and_config(
    tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from urlsieve.cli import main

    (tree / "adult").symlink_to("porn")
    args = ["check", "--lists", str(tree), "--categories", "adult", "--"]
    assert main([*args, "http://onlyporn.com/", "http://onlyads.com/"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("block\tporn\t") and out[1].startswith("none\t")
    cfg = tmp_path / "urlsieve.toml"
    cfg.write_text(f'[rules]\nlists = ["{tree}"]\ncategories = ["ads"]\n')
    assert main(["check", "--config", str(cfg), "--", "http://onlyporn.com/"]) == 0
    assert capsys.readouterr().out.startswith("none\t")
    assert main(["explain", "--config", str(cfg), "--", "http://onlyads.com/"]) == 0
    assert "ads" in capsys.readouterr().out
