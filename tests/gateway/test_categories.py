"""Choosing categories never loses a domain that another category lists too (a bypass)."""

from __future__ import annotations

from pathlib import Path

import pytest

from urlsieve import ConfigError, Filter
from urlsieve.gateway.config import load_config
from urlsieve.gateway.rules import compile_lists, filter_loader


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


def test_allow_rules_are_kept_whatever_the_selection(tree: Path) -> None:
    flt = Filter.from_lists([tree], categories=["porn"])
    assert flt.check("http://shared.com/").action == "allow"


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
