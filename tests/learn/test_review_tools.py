"""The review tools tell the truth (issue 30, item 9): ``urlsieve check --config``,
``urlsieve explain --config``, ``urlsieve config check --url`` and the service's
``/v1/explain`` decide every URL as a real ``urlsieve squid-helper`` process does — listed,
learned block, learned allow, unclassifiable, a promoted host, a query variant of a learned
page, unknown — and show a learned rule's evidence; ``learn show`` and ``learn list`` find
what the gateway enforces; category names are matched ignoring case."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.gateway.test_helper import HelperProcess
from urlsieve.cli import main
from urlsieve.gateway.config import load_config
from urlsieve.learn.overlay import build_overlay
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key
from urlsieve.service.app import create_app

#: URL -> (action the helper takes, category when blocked, what it is).
CASES = {
    "http://listed.test/any": ("block", "porn", "listed"),
    "http://learned.test/casino.html": ("block", "gambling", "learned block"),
    "http://learned.test/clean.html": ("allow", None, "learned allow"),
    "http://hidden.test/page.html": ("block", "unclassifiable", "unclassifiable"),
    "http://promo.test/never-seen.html": ("block", "gambling", "a page of a promoted host"),
    "http://promo.test/": ("block", "gambling", "the promoted host"),
    "http://learned.test/q?b=2&a=1&utm_source=x": ("block", "gambling", "a query variant"),
    "http://unknown.test/x": ("allow", None, "unknown (allow-first: passes, queued)"),
    "http://img.learned.test/logo.png": ("block", "gambling", "a resource of a dirty site"),
    "http://promo.test/site.css": ("block", "gambling", "a resource of a promoted site"),
    "http://calm.test/app.js": ("allow", None, "a resource of a clean site"),
}


def _learned(url: str, action: str, category: str, note: str = "") -> Learned:
    key, host = rule_key(url)
    return Learned(
        key=key,
        host=host,
        action=action,
        category=category,
        source="learned",
        score=185 if action == "block" else 0,
        evidence=(("<online casino>", 50, 2),) if action == "block" else (),
        url=url,
        content_hash="ab" * 32,
        fetched_at=1_763_000_000.0,
        note=note or ("score 185 > limit 50" if action == "block" else "score 0 <= limit 50"),
    )


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Path]:
    lists = tmp_path / "lists"
    (lists / "porn").mkdir(parents=True)
    (lists / "porn" / "domains").write_text("listed.test\n", encoding="utf-8")
    (lists / "gambling").mkdir()
    (lists / "gambling" / "domains").write_text("casino-listed.test\n", encoding="utf-8")
    state = tmp_path / "state"
    state.mkdir()
    conf = tmp_path / "gateway.toml"
    conf.write_text(
        f'[rules]\nlists = ["{lists}"]\n'
        '[squid]\nmode = "acl"\nreload_check_seconds = 3600\n'
        '[learn]\nqueue = "sqlite:state/queue.db"\noverlay = "state/learned.snap"\n'
        'directory = "state"\nunknown = "allow-first"\npromote_after = 3\n'
        '[learn.crawl]\nallow_networks = []\nhosts = { "intranet.test" = "10.1.2.3" }\n',
        encoding="utf-8",
    )
    verdicts = [
        _learned("http://learned.test/casino.html", "block", "gambling"),
        _learned("http://learned.test/clean.html", "allow", "clean"),
        _learned("http://learned.test/q?a=1&b=2", "block", "gambling"),
        _learned(
            "http://hidden.test/page.html",
            "block",
            "unclassifiable",
            "unclassifiable (robots): robots.txt of hidden.test disallows it",
        ),
        *(_learned(f"http://promo.test/p{i}.html", "block", "gambling") for i in range(3)),
        _learned("http://calm.test/", "allow", "clean"),
        *(
            _learned(url, "allow", "resource", "Content-Type image/png (a subresource)")
            for url in CASES
            if CASES[url][2].startswith("a resource")
        ),
    ]
    with VerdictStore(state / "verdicts.db") as store:
        store.put(verdicts)
        build_overlay(store, state / "learned", state / "learned.snap", promote_after=3)
    yield conf


def _helper_answers(conf: Path) -> dict[str, tuple[str, str | None]]:
    proc = HelperProcess("--config", str(conf))
    try:
        out = {}
        for number, url in enumerate(CASES):
            reply = proc.ask(f"{number} {url} 127.0.0.1 - GET -")
            assert reply.startswith(f"{number} "), reply
            if " OK" in reply:
                tag = re.search(r'tag="([^"]*)"', reply)
                out[url] = ("block", tag.group(1) if tag else None)
            else:
                out[url] = ("allow", None)
        log = proc.close()
    finally:
        proc.kill()
    assert "Traceback" not in log
    return out


def test_every_tool_agrees_with_a_real_helper(
    gateway: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = str(gateway)
    helper = _helper_answers(gateway)
    assert helper == {url: (action, cat) for url, (action, cat, _) in CASES.items()}, helper

    # urlsieve check --config: action, category, rule, url per line.
    capsys.readouterr()
    main(["check", "--config", conf, *CASES])
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    checked = {row[3]: (row[0], None if row[1] == "-" else row[1]) for row in rows}

    # urlsieve explain --config: the decision line, and the evidence of a learned rule.
    explained = {}
    for url in CASES:
        assert main(["explain", "--config", conf, url]) == 0
        text = capsys.readouterr().out
        found = re.search(r"decision:  (\w+) by .*\(category ([^,]+),", text)
        explained[url] = (found.group(1), found.group(2)) if found else ("none", None)
        if found and CASES[url][2] not in ("listed",):
            assert "learned:   learned" in text, text  # the provenance comment, in full
    assert "score=185" in _explain(conf, "http://learned.test/casino.html", capsys)
    assert "phrases=" in _explain(conf, "http://learned.test/casino.html", capsys)
    assert "promoted: 3 pages" in _explain(conf, "http://promo.test/never-seen.html", capsys)

    # urlsieve config check --url: one line per URL.
    args = ["config", "check", conf]
    for url in CASES:
        args += ["--url", url]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "learned: " in text and "1 whole hosts: promo.test (block gambling)" in text
    configured = {}
    for url in CASES:
        line = next(line for line in text.splitlines() if line.startswith(f"url {url}:"))
        found = re.match(r"url .*?: (block|allow) \(([^)]*)\)", line)
        configured[url] = (found.group(1), found.group(2)) if found else ("none", None)
        if CASES[url][0] == "allow" and found is None:
            assert "learn.unknown = allow-first" in line

    # The service's /v1/explain.
    config = load_config(conf, env={})
    with TestClient(create_app(config)) as client:
        served = {}
        for url in CASES:
            answer = client.get("/v1/explain", params={"url": url})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            served[url] = (body["action"], body["category"])
            if CASES[url][2] in ("learned block", "a query variant"):
                assert "score=185" in body["evidence"], body

    for url, (action, category, what) in CASES.items():
        # An unknown URL: no rule ("none"), which the helper passes (allow-first).
        expected = (action, category) if what.startswith(("listed", "learned b", "unclass",
                                                           "a page", "the prom", "a query",
                                                           "a resource of a d",
                                                           "a resource of a p")) \
            else ("allow", "clean") if what == "learned allow" \
            else ("allow", "resource") if what == "a resource of a clean site" \
            else ("none", None)  # fmt: skip
        for tool, answers in (("check", checked), ("explain", explained),
                              ("config check", configured), ("/v1/explain", served)):  # fmt: skip
            assert answers[url] == expected, (tool, url, what, answers[url])
            # ...and the helper's decision is the tool's: blocked with the same category,
            # or not blocked (a learned allow, an unknown URL passed first-time).
            blocked = answers[url][0] == "block"
            assert helper[url] == ((action, category) if blocked else ("allow", None)), (tool, url)


def _explain(conf: str, url: str, capsys: pytest.CaptureFixture[str]) -> str:
    main(["explain", "--config", conf, url])
    return capsys.readouterr().out


def test_learn_show_and_list_find_what_the_gateway_enforces(
    gateway: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = str(gateway)
    capsys.readouterr()
    for url, wanted in (
        ("http://learned.test/q?b=2&a=1&utm_source=x", "block (gambling)"),  # query variant
        ("http://promo.test/never-seen.html", "block (gambling)"),  # page of a promoted host
        ("promo.test", "block (gambling)"),  # the promoted host itself
        ("http://hidden.test/page.html", "block (unclassifiable)"),
        ("http://img.learned.test/logo.png", "block (gambling)"),  # a resource: its site's
        ("http://img.learned.test/logo.png", "its site learned.test has 2 pages learned dirty"),
        ("http://promo.test/site.css", "its site promo.test is blocked (promoted: 3 pages"),
        ("http://calm.test/app.js", "allow (resource)"),
        ("http://calm.test/app.js", "its site calm.test has no dirty page (1 page allowed)"),
    ):
        assert main(["learn", "--config", conf, "show", url]) == 0, url
        shown = capsys.readouterr().out
        assert wanted in shown, (url, shown)
    assert main(["learn", "--config", conf, "show", "promo.test"]) == 0
    assert "promoted: 3 pages of promo.test" in capsys.readouterr().out
    assert main(["learn", "--config", conf, "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "block\tgambling\tpromoted\t185\tpromo.test" in listed
    assert "block\tgambling\tlearned\t0\timg.learned.test/logo.png" in listed  # its site's
    assert "allow\tresource\tlearned\t0\tcalm.test/app.js" in listed
    assert main(["learn", "--config", conf, "list", "--source", "override"]) == 0
    assert "promo.test" not in capsys.readouterr().out
    # A target the crawler refuses: nothing learned, and the setting that would allow it.
    for url in ("http://10.1.2.3/x", "http://intranet.test/y"):
        assert main(["learn", "--config", conf, "show", url]) == 1
        shown = capsys.readouterr().out
        assert "the crawler does not fetch it" in shown and "learn.crawl.allow_networks" in shown
    assert main(["learn", "--config", conf, "show", "http://unknown.test/x"]) == 1
    assert "unknown to the learner" in capsys.readouterr().out


def test_category_names_match_ignoring_case_with_a_did_you_mean(
    gateway: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = str(gateway)
    capsys.readouterr()
    # --categories in another case selects the lists' category.
    assert main(["check", "--config", conf, "--categories", "PORN", "http://listed.test/"]) == 3
    assert capsys.readouterr().out.startswith("block\tporn\t")
    assert main(["check", "--config", conf, "--categories", "gamblng", "http://x.test/"]) == 2
    assert "gamblng (did you mean 'gambling'?)" in capsys.readouterr().err


def test_learned_categories_take_the_lists_spelling(tmp_path: Path) -> None:
    """A phrase list headed ``Gambling`` learns under the lists' ``gambling``, and
    ``learn.limits`` keys match either way."""
    from urlsieve.cli.learn import _named_as_the_lists
    from urlsieve.learn.config import read_learn_settings
    from urlsieve.learn.phrases import PhraseSet

    lists = tmp_path / "lists" / "gambling"
    lists.mkdir(parents=True)
    (lists / "domains").write_text("casino-listed.test\n", encoding="utf-8")
    phrases = tmp_path / "weighted"
    phrases.write_text('#listcategory: "Gambling"\n< casino ><60>\n', encoding="utf-8")
    conf = tmp_path / "gateway.toml"
    conf.write_text(
        f'[rules]\nlists = ["{tmp_path / "lists"}"]\n'
        f'[learn]\nqueue = "sqlite:q.db"\noverlay = "o.snap"\ndirectory = "s"\n'
        f'phrases = ["{phrases}"]\nlimits = {{ GAMBLING = 40, gamblin = 10 }}\n',
        encoding="utf-8",
    )
    settings = read_learn_settings(str(conf))
    logs: list[str] = []
    loaded = PhraseSet.load(weighted=settings.phrases)
    assert loaded.categories == {"Gambling"}
    renamed, limits = _named_as_the_lists(loaded, settings, logs.append)
    assert renamed.categories == {"gambling"}
    assert limits == {"gambling": 40, "gamblin": 10}
    assert any("did you mean 'gambling'" in line for line in logs), logs
    assert json.dumps(limits)  # plain data


def test_an_override_is_filed_under_the_lists_spelling(
    gateway: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``learn block --category GAMBLING`` (and the service's and console's overrides, which
    go through the same admin) files the block under the lists' ``gambling``, so the
    helper and the review tools name one category; a name the lists do not have is a
    category of its own."""
    conf = str(gateway)
    assert main(["learn", "--config", conf, "block", "odd.test", "--category", "GAMBLING"]) == 0
    assert "(gambling)" in capsys.readouterr().out
    assert main(["check", "--config", conf, "http://odd.test/x"]) == 3
    assert capsys.readouterr().out.startswith("block\tgambling\t")
    assert main(["learn", "--config", conf, "block", "new.test", "--category", "Homework"]) == 0
    assert "(Homework)" in capsys.readouterr().out
