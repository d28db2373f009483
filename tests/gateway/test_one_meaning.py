"""One meaning for snapshots and categories in every command: a snapshot compiled from
every category, a category selection, and one case list decided by ``check`` (through the
configuration, ``--snapshot`` and ``--lists FILE.snap``), ``filter``, ``explain``,
``config check``, the Squid helper process and the service, with the same verdict; with
no selection, UT1's usage marks decide which categories block."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from urlsieve import Filter
from urlsieve.cli import main
from urlsieve.gateway.config import load_config
from urlsieve.service.app import create_app

SELECTED = ["adult", "social_networks"]
#: url, verdict under the selection, deciding category, every selected category matching
CASES = [
    ("http://x.test/page", "block", "adult", ["adult"]),
    ("http://www.facebook.test/", "block", "social_networks", ["social_networks"]),
    ("http://bank.test/", "none", None, []),
    ("http://news.test/a", "none", None, []),
    ("http://elsewhere.test/", "none", None, []),
]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    tree = tmp_path / "ut1"
    for category, domain in [
        ("adult", "x.test"),
        ("blog", "facebook.test"),
        ("social_networks", "facebook.test"),
        ("bank", "bank.test"),
        ("press", "news.test"),
    ]:
        (tree / category).mkdir(parents=True)
        (tree / category / "domains").write_text(f"{domain}\n")
    (tree / "press" / "usage").write_text("black\npress\n")  # UT1's: the catalogue says white
    (tree / "bank" / "usage").write_text("white\nblack\n")
    (tree / "global_usage").write_text(
        "".join(
            f"NAME:\t{name}\nDEFAULT_TYPE: {kind}\n\n"
            for name, kind in [
                ("adult", "black"),
                ("blog", "black"),
                ("social_networks", "black"),
                ("bank", "white"),
                ("press", "white"),
            ]
        )
    )
    every = tmp_path / "every.snap"
    assert main(["compile", "--lists", str(tree), "-o", str(every)]) == 0
    config = tmp_path / "urlsieve.toml"
    config.write_text(
        f'[rules]\nsnapshot = "{every}"\ncategories = {json.dumps(SELECTED)}\n'
        '[squid]\nredirect_url = "http://block.test/?c=%c"\nmode = "redirect"\n'
        '[service]\ntoken = "0123456789abcdef-token"\n'
    )
    return tree, every, config


def _check(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[dict[str, object]]:
    capsys.readouterr()
    main(["check", "--format", "jsonl", *argv, *(c[0] for c in CASES)])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_every_command_gives_the_same_verdicts(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _tree, every, config = setup
    selection = ",".join(SELECTED)
    for argv in (
        ["--config", str(config)],
        ["--snapshot", str(every), "--categories", selection],
        ["--lists", str(every), "--categories", selection],  # no "give it alone"
    ):
        records = _check(capsys, argv)
        got = [(r["url"], r["action"], r["category"], r["categories"]) for r in records]
        assert got == CASES, argv
    # filter: the URLs that pass
    capsys.readouterr()
    stdin = "".join(f"{c[0]}\n" for c in CASES)
    proc = subprocess.run(
        [sys.executable, "-m", "urlsieve", "filter", "--config", str(config)],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    got = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [(g[3], g[0], None if g[1] == "-" else g[1]) for g in got] == [c[:3] for c in CASES], (
        proc.stderr
    )
    # explain: the decision and the matching categories
    for url, action, category, matching in CASES:
        capsys.readouterr()
        main(["explain", "--config", str(config), url])
        out = capsys.readouterr().out
        if category is None:
            assert "decision:  none" in out
        else:
            assert f"decision:  {action} by" in out and f"category {category}," in out
            assert f"matching:  {', '.join(matching)}" in out
    # config check: the all-category snapshot serves the selection
    capsys.readouterr()
    assert main(["config", "check", str(config)]) == 0
    assert "serves the selected categories adult, social_networks" in capsys.readouterr().out
    # the Squid helper
    helper = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--config", str(config)],
        input="".join(f"{c[0]} 10.0.0.1/- - GET\n" for c in CASES),
        capture_output=True,
        text=True,
        check=True,
    )
    replies = helper.stdout.splitlines()
    for (_url, action, category, _m), reply in zip(CASES, replies, strict=True):
        if action == "block":
            assert reply == f'OK status=302 url="http://block.test/?c={category}"'
        else:
            assert reply == "ERR"
    # the service
    with TestClient(create_app(load_config(str(config), env={}))) as client:
        for url, action, category, matching in CASES:
            body = client.get("/v1/check", params={"url": url}).json()
            assert (body["action"], body["category"]) == (action, category), url
            body = client.get("/v1/explain", params={"url": url}).json()
            assert (body["action"], body["category"]) == (action, category), url
            assert body["matching"] == matching, url


def test_with_no_selection_ut1_usage_marks_decide(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _every, _config = setup
    flt = Filter.from_lists([tree])
    assert flt.check("http://bank.test/").action == "none"  # DEFAULT_TYPE white
    assert flt.check("http://news.test/").action == "none"  # white, whatever usage says
    verdict = flt.check("http://facebook.test/")
    assert verdict.action == "block"
    assert flt.matching_categories("http://facebook.test/") == ["blog", "social_networks"]
    capsys.readouterr()
    assert main(["compile", "--lists", str(tree), "-o", str(tree.parent / "x.snap")]) == 0
    err = capsys.readouterr().err
    assert f"skipped: {tree / 'bank'}: allow-type category skipped (DEFAULT_TYPE white" in err
    assert f"skipped: {tree / 'press'}: allow-type category skipped" in err


def test_a_snapshot_for_another_selection_is_refused_with_the_fix(
    setup: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tree, _every, _config = setup
    part = tree.parent / "adult.snap"
    assert main(["compile", "--lists", str(tree), "--categories", "adult", "-o", str(part)]) == 0
    capsys.readouterr()
    assert main(["check", "--snapshot", str(part), "--categories", "blog", "http://x.test/"]) == 2
    assert "compiled for categories adult, not blog" in capsys.readouterr().err
    # a part of the compiled selection is served
    assert main(["check", "--snapshot", str(part), "--categories", "adult", "http://x.test/"]) == 3


def test_compile_shows_progress_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import urlsieve.cli._lists as lists

    listed = tmp_path / "big.txt"
    listed.write_text("".join(f"host{k}.test\n" for k in range(20000)))
    monkeypatch.setattr(lists, "PROGRESS_BYTES", 1000)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(lists._Bar, "__call__", _always_draw(lists._Bar.__call__))
    assert main(["compile", "--lists", str(listed), "-o", str(tmp_path / "b.snap")]) == 0
    assert "loading lists [" in capsys.readouterr().err


def _always_draw(draw):  # type: ignore[no-untyped-def]
    def call(self, chars):  # type: ignore[no-untyped-def]
        self.last = 0.0
        return draw(self, chars)

    return call
