"""One contract for the verdict stores: SQLite (one machine) and Valkey (a fleet)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import ServerProcess
from urlsieve.exceptions import QueueUnavailable
from urlsieve.learn.verdicts import Learned, Verdicts, open_verdicts, rule_key


@pytest.fixture(params=["sqlite", "valkey"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Verdicts]:
    if request.param == "sqlite":
        spec = str(tmp_path / "verdicts.db")
    else:
        server: ServerProcess = request.getfixturevalue("valkey_server")
        spec = f"valkey://127.0.0.1:{server.port}/0?prefix=v{uuid.uuid4().hex}"
    opened = open_verdicts(spec)
    yield opened
    opened.close()


def verdict(url: str, source: str = "learned", action: str = "block", **kw: object) -> Learned:
    key, host = rule_key(url)
    return Learned(key=key, host=host, action=action, category="gambling", source=source,
                   url=url, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_put_get_all_and_counts(store: Verdicts) -> None:
    before = store.version()
    store.put([verdict("http://b.test/x", score=80, evidence=(("<casino>", 30, 2),)),
               verdict("http://a.test/y", action="allow")])  # fmt: skip
    assert store.version() != before
    got = store.get(rule_key("http://b.test/x")[0])
    assert got is not None and got.score == 80 and got.evidence == (("<casino>", 30, 2),)
    assert [v.host for v in store.all()] == ["a.test", "b.test"]
    assert store.find("http://B.TEST/x") == got
    assert store.count() == 2
    assert store.counts() == {("learned", "block", "gambling"): 1,
                              ("learned", "allow", "gambling"): 1}  # fmt: skip


def test_an_override_survives_relearning_and_first_sighting_is_kept(store: Verdicts) -> None:
    store.put([verdict("http://c.test/", first_seen=100.0)])
    store.put([verdict("http://c.test/", score=5)])  # re-learned, no first sighting
    got = store.get(rule_key("http://c.test/")[0])
    assert got is not None and got.first_seen == 100.0 and got.score == 5
    store.put([verdict("http://c.test/", source="override", action="allow")])
    store.put([verdict("http://c.test/", action="block", score=99)])  # learned again
    got = store.get(rule_key("http://c.test/")[0])
    assert got is not None and (got.source, got.action) == ("override", "allow")
    assert [v.key for v in store.all(source="override")] == [got.key]


def test_forget_changes_the_version(store: Verdicts) -> None:
    store.put([verdict("http://d.test/")])
    version = store.version()
    assert store.forget([rule_key("http://d.test/")[0], "never.test"]) == 1
    assert store.version() != version and store.count() == 0


def test_a_server_that_does_not_answer_is_a_typed_error() -> None:
    store = open_verdicts("valkey://127.0.0.1:1/0?prefix=x")
    with pytest.raises(QueueUnavailable, match=r"127\.0\.0\.1:1"):
        store.put([verdict("http://e.test/")])
