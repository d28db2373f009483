"""The production matcher and the decomposition tree agree on 100k generated rules."""

from __future__ import annotations

import random

from urlsieve.match import DecompositionTree, HashMatcher
from urlsieve.rules import ALLOW, BLOCK, Rule
from urlsieve.url import URL

LABELS = ["a", "b", "ex", "www", "cdn", "m", "x1", "shop"]
TLDS = ["com", "org", "co.uk"]
SEGMENTS = ["p", "q", "ads", "ads2", "x", ""]


def _host(rnd: random.Random) -> str:
    return ".".join(rnd.choices(LABELS, k=rnd.randint(1, 3))) + "." + rnd.choice(TLDS)


def _path(rnd: random.Random, depth: int) -> str:
    return "/" + "/".join(rnd.choices(SEGMENTS[:-1], k=depth)) if depth else "/"


def _rules(rnd: random.Random, n: int) -> list[Rule]:
    out = []
    for i in range(n):
        host = _host(rnd)
        path = _path(rnd, rnd.choice([0, 0, 1, 2, 3]))
        if path != "/" and rnd.random() < 0.3:
            path += "/"
        query = rnd.choice(["id=1", "id=2"]) if rnd.random() < 0.05 else None
        is_ip = rnd.random() < 0.02
        if is_ip:
            host = f"10.0.{rnd.randint(0, 3)}.{rnd.randint(0, 3)}"
        out.append(
            Rule(
                pattern=f"r{i}",
                action=ALLOW if rnd.random() < 0.2 else BLOCK,
                category="gen",
                host=host,
                path=path,
                query=query,
                exact_host=rnd.random() < 0.1,
                anchored=rnd.random() < 0.1,
                is_ip=is_ip,
                line=i,
            )
        )
    return out


def _urls(rnd: random.Random, n: int) -> list[URL]:
    out = []
    for _ in range(n):
        if rnd.random() < 0.05:
            host, is_ip = f"10.0.{rnd.randint(0, 3)}.{rnd.randint(0, 3)}", True
        else:
            host, is_ip = _host(rnd), False
        path = "/" + "/".join(rnd.choices(SEGMENTS, k=rnd.randint(0, 4)))
        query = rnd.choice([None, None, "id=1", "id=2", ""])
        out.append(URL("http", host, path, query, is_ip=is_ip))
    return out


def test_hash_matcher_and_tree_agree() -> None:
    rnd = random.Random(20240503)
    rules = _rules(rnd, 100_000)
    urls = _urls(rnd, 30_000)
    fast = HashMatcher(rules)
    tree = DecompositionTree(rules)
    assert len(fast) == len(tree)
    decided = 0
    for url in urls:
        a, b = fast.decide(url), tree._decide(url)
        assert a == b, (url, a, b)
        decided += a is not None
    # the generator is dense enough that most URLs hit a rule, in every action
    assert decided > len(urls) // 3
    actions = {fast.decide(u).action for u in urls if fast.decide(u) is not None}  # type: ignore[union-attr]
    assert actions == {BLOCK, ALLOW}
