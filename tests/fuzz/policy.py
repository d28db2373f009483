"""The small rule set every driver is checked against, as rules and as list files."""

from __future__ import annotations

from pathlib import Path

from urlsieve import Filter
from urlsieve.rules.model import ALLOW, BLOCK, parse_rule

#: Block list lines (one file, category ``fuzz``) and allow list lines.
BLOCK_LINES = ("bad.org", "ads.example/ads", "latin.example/caf%E9", "10.9.8.7")
ALLOW_LINES = ("bad.org/public/",)

#: URLs the rules leave alone (no rule, or the allow exception), each must not be blocked.
NOT_BLOCKED = (
    b"http://good.org/",
    b"http://bad.org.good.org/",
    b"http://notbad.org/",
    b"http://ads.example/",
    b"http://ads.example/adsense",
    b"http://ads.example/x/ads",
    b"http://latin.example/cafe",
    b"http://latin.example/caf%C3%A9",  # UTF-8 é is another byte string than Latin-1 é
    b"http://10.9.8.8/",
    b"http://bad.org/public/",
    b"http://bad.org/public/page.html",
)

BLOCK_PAGE = "http://block.lan/?url=%u&cat=%c&client=%a&name=%n&user=%i&rule=%r"


def rules_filter() -> Filter:
    rules = [
        *(parse_rule(p, BLOCK, "fuzz", "lists/fuzz.txt", n) for n, p in enumerate(BLOCK_LINES, 1)),
        *(parse_rule(p, ALLOW, "ok", "lists/ok.txt", n) for n, p in enumerate(ALLOW_LINES, 1)),
    ]
    return Filter(rules)


def write_lists(directory: Path) -> tuple[Path, Path]:
    """The rule set as a block list and an allow list file; returns their paths."""
    block = directory / "fuzz.txt"
    allow = directory / "ok.txt"
    block.write_text("".join(f"{line}\n" for line in BLOCK_LINES), "utf-8")
    allow.write_text("".join(f"{line}\n" for line in ALLOW_LINES), "utf-8")
    return block, allow
