"""Random rule sets and URLs over a small vocabulary, so that rules and URLs collide often."""

from __future__ import annotations

import random

LABELS = ["a", "b", "evil", "ads", "www", "x1", "shop", "m"]
TLDS = ["com", "org", "co.uk", "net"]
SEGMENTS = ["ads", "p", "x", "ads.html", "a", "b", "img", "%41", "q"]
QUERIES = ["id=1", "id=2", "", "a=b&c=d"]
IPS = ["10.1.2.3", "192.168.0.1", "[2001:db8::1]"]


def random_host(rnd: random.Random) -> str:
    return ".".join(rnd.choices(LABELS, k=rnd.randint(1, 3))) + "." + rnd.choice(TLDS)


def random_path(rnd: random.Random) -> str:
    segments = rnd.choices(SEGMENTS, k=rnd.randint(0, 3))
    path = "/" + "/".join(segments)
    if segments and rnd.random() < 0.3:
        path += "/"
    return path


def random_pattern(rnd: random.Random) -> str:
    host = rnd.choice(IPS) if rnd.random() < 0.05 else random_host(rnd)
    roll = rnd.random()
    if roll < 0.4:
        pattern = host
    elif roll < 0.85:
        pattern = host + random_path(rnd)
    else:
        pattern = host + random_path(rnd) + "?" + rnd.choice(QUERIES)
    if rnd.random() < 0.1:
        pattern = "=" + pattern
    if rnd.random() < 0.1 and "?" not in pattern:
        pattern += "|"
    return pattern


def random_rules(n: int, seed: int) -> list[str]:
    """Patterns; about a quarter are ``@@`` allow rules."""
    rnd = random.Random(seed)
    return [("@@" if rnd.random() < 0.25 else "") + random_pattern(rnd) for _ in range(n)]


def random_urls(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        if rnd.random() < 0.05:
            host = rnd.choice(IPS)
        else:
            host = random_host(rnd)
            if rnd.random() < 0.3:
                host = rnd.choice(LABELS) + "." + host
        url = f"{rnd.choice(['http', 'https'])}://{host}{random_path(rnd)}"
        if rnd.random() < 0.3:
            url += "?" + rnd.choice(QUERIES)
        out.append(url)
    return out
