"""The unit of learning is the site (issue 30, item 1): promotion reaches the registrable
domain, the site's exceptions stay, sites known clean are listed for the gateway, ``learn
show`` explains a site's verdict, and a gateway notices a new overlay at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from urlsieve import Filter
from urlsieve.cli import main
from urlsieve.gateway.live import LiveRules
from urlsieve.layered import LayeredFilter
from urlsieve.learn.overlay import (
    build_overlay,
    clean_domains,
    promoted_hosts,
    rendered_resources,
    site_report,
)
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key
from urlsieve.url.expressions import learning_domain


def page(url: str, action: str = "block", category: str = "gambling", **kw: object) -> Learned:
    key, host = rule_key(url)
    return Learned(key=key, host=host, action=action, category=category, source="learned",
                   url=url, score=kw.pop("score", 90), **kw)  # type: ignore[arg-type]  # fmt: skip


def clean(url: str) -> Learned:
    return page(url, "allow", "clean", score=0)


@pytest.mark.parametrize(
    ("host", "site"),
    [
        ("a1.evil.test", "evil.test"),
        ("A.B.Example.CO.UK.", "example.co.uk"),
        ("x.user.github.io", "user.github.io"),  # a private suffix: each user is a site
        ("10.0.0.1", "10.0.0.1"),
        ("[::1]", "[::1]"),
        ("localhost", "localhost"),
        ("co.uk", "co.uk"),
    ],
)
def test_the_site_of_a_host(host: str, site: str) -> None:
    assert learning_domain(host) == site


def test_pages_of_several_subdomains_promote_the_registrable_domain() -> None:
    verdicts = [page(f"http://a{i}.evil.test/en/casino.html") for i in range(3)]
    promoted = promoted_hosts(verdicts, 3)
    assert list(promoted) == ["evil.test"]
    assert promoted["evil.test"].is_host and promoted["evil.test"].category == "gambling"
    assert promoted_hosts(verdicts[:2], 3) == {}  # not enough pages
    assert promoted_hosts(verdicts, 0) == {}  # promotion off


def test_a_shared_platform_is_not_promoted_for_its_users_pages() -> None:
    verdicts = [page(f"http://u{i}.github.io/casino.html") for i in range(5)]
    assert promoted_hosts(verdicts, 3) == {}
    mine = [page(f"http://me.github.io/{i}.html") for i in range(3)]
    assert list(promoted_hosts(verdicts + mine, 3)) == ["me.github.io"]


def test_mixed_sites_are_not_promoted() -> None:
    dirty = [page(f"http://mixed.test/{i}.html") for i in range(3)]
    assert promoted_hosts([*dirty, *(clean(f"http://mixed.test/c{i}") for i in range(3))], 3) == {}
    two = [*dirty, page("http://mixed.test/x", category="adult")]
    assert promoted_hosts(two, 3) == {}  # two categories
    assert promoted_hosts([*dirty, page("http://mixed.test/r", category="unclassifiable")], 3)


def test_the_overlay_blocks_new_subdomains_and_keeps_the_exceptions(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path / "v.db")
    store.put([page(f"http://a{i}.evil.test/en/casino.html") for i in range(4)])
    store.put([clean("http://www.evil.test/about.html")])  # a clean page: an exception
    store.put([clean(f"http://garden.test/{i}.html") for i in range(3)])
    store.put([clean("http://two.test/1.html"), clean("http://two.test/2.html")])
    build = build_overlay(store, tmp_path / "tree", tmp_path / "o.snap", promote_after=3)
    assert build.promoted == 1
    overlay = Filter.load(tmp_path / "o.snap")
    for url in ("http://b7.evil.test/new", "http://evil.test/", "http://x.y.evil.test/p?q=1"):
        verdict = overlay.check(url)
        assert (verdict.action, verdict.category) == ("block", "gambling"), url
    exception = overlay.check("http://www.evil.test/about.html")
    assert (exception.action, exception.category) == ("allow", "clean")
    assert overlay.check("http://notevil.test/").rule is None
    # Sites known clean go to the gateway in the snapshot's metadata.
    layered = LayeredFilter(Filter.from_rules([]), overlay)
    assert layered.clean_domains == {"garden.test"}
    assert clean_domains(store.all(), 3) == ["garden.test"]
    store.close()


def test_site_report_says_the_verdict_and_its_exceptions() -> None:
    verdicts = [page(f"http://a{i}.evil.test/x") for i in range(3)]
    verdicts.append(clean("http://evil.test/about"))
    report = site_report(verdicts, "new.evil.test", 3)
    assert report["domain"] == "evil.test" and report["state"] == "block gambling"
    assert [e.key for e in report["exceptions"]] == ["evil.test/about"]
    assert site_report(verdicts, "other.test", 3)["state"] == "unknown"
    garden = [clean(f"http://garden.test/{i}") for i in range(3)]
    garden.append(page("http://garden.test/bad"))  # a dirty page on a clean site
    mostly = site_report(garden, "garden.test", 3)  # the reverse: a dirty page, clean site
    assert mostly["state"].startswith("mostly clean") and mostly["verdict"] is None
    assert [e.key for e in mostly["exceptions"]] == ["garden.test/bad"]
    assert site_report(garden[:3], "garden.test", 3)["state"] == "known clean"


def _learn_config(tmp: Path) -> Path:
    conf = tmp / "gw.toml"
    conf.write_text(
        '[rules]\nlists = []\n[learn]\nqueue = "sqlite:state/queue.db"\n'
        'directory = "state"\noverlay = "state/learned.snap"\npromote_after = 3\n',
        encoding="utf-8",
    )
    return conf


def test_learn_show_explains_the_site_and_its_exceptions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _learn_config(tmp_path)
    (tmp_path / "state").mkdir()
    store = VerdictStore(tmp_path / "state" / "verdicts.db")
    store.put([page(f"http://a{i}.evil.test/en/casino.html") for i in range(3)])
    store.put([clean("http://evil.test/about.html")])
    store.close()
    assert main(["learn", "--config", str(conf), "show", "http://z9.evil.test/fresh"]) == 0
    out = capsys.readouterr().out
    assert "no verdict of its own: its site's verdict decides" in out
    assert "site:      evil.test: block gambling; 4 pages learned (3 gambling blocked" in out
    assert "promoted: 3 pages of evil.test classified gambling" in out
    assert "exception: allow (clean) evil.test/about.html" in out
    assert main(["learn", "--config", str(conf), "show", "http://evil.test/about.html"]) == 0
    out = capsys.readouterr().out
    assert "verdict:   allow (clean)" in out and "site:      evil.test: block" in out
    assert main(["learn", "--config", str(conf), "show", "http://fresh.test/"]) == 1
    assert "site:      fresh.test: unknown; 0 pages learned" in capsys.readouterr().out


def test_a_gateway_notices_a_new_overlay_without_waiting_for_its_check(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path / "v.db")
    snap = tmp_path / "o.snap"
    build_overlay(store, tmp_path / "tree", snap, promote_after=3)

    def load() -> Filter:
        return Filter.load(snap)

    told = LiveRules(load, watch=[str(snap)], check_seconds=3600, notify=[str(snap)])
    untold = LiveRules(load, watch=[str(snap)], check_seconds=3600)
    told.poll(), untold.poll()  # the first check of each: nothing changed
    store.put([page("http://late.test/x")])
    build_overlay(store, tmp_path / "tree", snap, promote_after=3)
    assert told.poll() is True  # the change counter moved: checked and reloaded now
    assert told.get().check("http://late.test/x").action == "block"
    assert untold.poll() is False  # the one-hour check is not due
    assert told.poll() is False  # one reload per change
    store.close()


# -- subresources follow their site (issue 30: a new site's images are not unclassifiable) --


def resource(url: str) -> Learned:
    return page(url, "allow", "resource", score=0, note="Content-Type image/png (a subresource)")


def rendered(verdicts: list[Learned], url: str, after: int = 3) -> Learned:
    return rendered_resources(verdicts, after)[rule_key(url)[0]]


def test_a_resource_of_a_site_with_no_page_is_allowed() -> None:
    img = "http://cdn.new.test/logo.png"
    got = rendered([resource(img)], img)
    assert (got.action, got.category) == ("allow", "resource")
    assert "its site new.test has no dirty page (no page learned yet)" in got.note
    # ... nor with clean pages only (and a resource never counts as a page of its site)
    verdicts = [resource(img), clean("http://new.test/a.html"), clean("http://www.new.test/b")]
    got = rendered(verdicts, img)
    assert (got.action, got.category) == ("allow", "resource")
    assert "2 pages allowed" in got.note
    many = [resource(f"http://new.test/{i}.png") for i in range(5)]
    assert clean_domains(many, 3) == [] and promoted_hosts(many, 3) == {}
    assert site_report(many, "new.test", 3)["pages"] == 0


def test_a_resource_of_a_site_with_a_dirty_page_is_blocked_with_its_category() -> None:
    img = "http://img.mixed.test/a.png"
    verdicts = [
        resource(img),
        *(clean(f"http://mixed.test/c{i}") for i in range(5)),
        page("http://www.mixed.test/casino.html"),  # one dirty page among clean ones
    ]
    got = rendered(verdicts, img)
    assert (got.action, got.category) == ("block", "gambling")
    assert "its site mixed.test has 1 page learned dirty (1 gambling" in got.note
    # An unclassifiable or redirect verdict is not a dirty page.
    other = [resource(img), page("http://mixed.test/x", category="unclassifiable")]
    assert rendered(other, img).action == "allow"


def test_a_resource_of_a_promoted_or_blocked_site_is_blocked() -> None:
    img = "http://static.evil.test/s.css"
    dirty = [page(f"http://a{i}.evil.test/en/casino.html") for i in range(3)]
    got = rendered([resource(img), *dirty], img)
    assert (got.action, got.category) == ("block", "gambling")
    assert "promoted" in got.note
    # An operator's host block decides (its category), and a host allow does not unblock
    # a site with a dirty page (the worse wins).
    host = Learned(key="evil.test", host="evil.test", action="block", category="adult",
                   source="override")  # fmt: skip
    assert rendered([resource(img), host], img).category == "adult"
    allowed = Learned(key="static.evil.test", host="static.evil.test", action="allow",
                      category="override", source="override")  # fmt: skip
    assert rendered([resource(img), allowed], img).action == "allow"
    assert rendered([resource(img), allowed, dirty[0]], img).action == "block"


def test_the_overlay_flips_a_sites_resources_when_a_page_is_learned_dirty(
    tmp_path: Path,
) -> None:
    store = VerdictStore(tmp_path / "v.db")
    img, css = "http://fresh.test/logo.png", "http://cdn.fresh.test/site.css"
    store.put([resource(img), resource(css), clean("http://fresh.test/")])
    build_overlay(store, tmp_path / "tree", tmp_path / "o.snap", promote_after=3)
    overlay = Filter.load(tmp_path / "o.snap")
    assert [overlay.check(u).action for u in (img, css)] == ["allow", "allow"]
    assert overlay.check("http://fresh.test/other.png").action == "none"  # no verdict of its own
    overlay.close()
    assert "fresh.test/logo.png" in (tmp_path / "tree/allow/resource/urls").read_text("utf-8")
    store.put([page("http://www.fresh.test/poker.html")])
    build_overlay(store, tmp_path / "tree", tmp_path / "o.snap", promote_after=3)
    overlay = Filter.load(tmp_path / "o.snap")
    for url in (img, css):
        assert (overlay.check(url).action, overlay.check(url).category) == ("block", "gambling")
    overlay.close()
    assert (tmp_path / "tree/allow/resource/urls").read_text("utf-8") == ""
    # The page's verdict forgotten: the resources are allowed again.
    store.forget([rule_key("http://www.fresh.test/poker.html")[0]])
    build_overlay(store, tmp_path / "tree", tmp_path / "o.snap", promote_after=3)
    overlay = Filter.load(tmp_path / "o.snap")
    assert overlay.check(img).action == "allow"
    overlay.close()
    store.close()


_HOSTS = ["a.site.test", "b.site.test", "site.test", "other.test", "x.u.github.io", "10.0.0.1"]
_KINDS = [("block", "gambling"), ("block", "adult"), ("allow", "clean"),
          ("block", "unclassifiable"), ("allow", "resource")]  # fmt: skip


@given(
    st.lists(
        st.tuples(st.sampled_from(_HOSTS), st.sampled_from(_KINDS), st.integers(0, 5)),
        max_size=14,
    ),
    st.sampled_from(_HOSTS),
)
def test_a_resource_is_blocked_exactly_when_its_site_has_a_dirty_page(
    rows: list[tuple[str, tuple[str, str], int]], host: str
) -> None:
    """Any mix of pages: a resource is blocked iff a page of its registrable domain was
    learned dirty (unclassifiable pages and other resources do not count), with one of
    those pages' categories; a resource is never counted as a page."""
    verdicts = {}
    for where, (action, category), n in rows:
        v = page(f"http://{where}/p{n}.html", action, category)
        verdicts[v.key] = v
    img = resource(f"http://{host}/logo.png")
    got = rendered([*verdicts.values(), img], f"http://{host}/logo.png")
    site = learning_domain(host)
    dirty = {
        v.category
        for v in verdicts.values()
        if learning_domain(v.host) == site
        and v.action == "block"
        and v.category != "unclassifiable"
    }
    assert (got.action == "block") == bool(dirty)
    assert got.category in dirty if dirty else got.category == "resource"
    with_img = [*verdicts.values(), img]
    assert (
        site_report(with_img, host, 3)["pages"]
        == site_report(list(verdicts.values()), host, 3)["pages"]
    )
