"""``urlsieve demo``: the main job on bundled sample data — no files to find, no server.

It filters the bundled sample requests (evasion spellings among them) through
the bundled sample lists, then de-duplicates them in a local ``exact:`` store,
and prints what happened and why.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import Any

from urlsieve._accel import report
from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Filter
from urlsieve.seen import open_seen


def sample_urls() -> list[str]:
    """The bundled sample requests (comments and blank lines removed)."""
    text = resources.files("urlsieve").joinpath("data/sample-urls.txt").read_text("utf-8")
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _relative(where: str, root: Path) -> str:
    try:
        return str(Path(where).relative_to(root))
    except ValueError:
        return where


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="filter and de-duplicate the bundled sample requests (no setup needed)",
        description=(
            "Filter the bundled sample requests through the bundled sample lists "
            "(a squidGuard-style tree), then de-duplicate them in a local seen store."
        ),
    )
    p.add_argument(
        "--store",
        metavar="SPEC",
        help="seen store to de-duplicate into (default: exact: in a temporary directory)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    urls = sample_urls()
    with ExitStack() as stack:
        lists = Path(stack.enter_context(resources.as_file(resources.files("urlsieve"))))
        lists /= "data/sample-lists"
        # The sample tree's "allowed" category is a white-usage list: named as an allow list.
        sieve = Filter.from_lists([lists], [lists / "allowed"])
        print(f"Filtering {len(urls)} sample requests with {len(sieve)} rules from {lists}\n")
        width = max(len(u) for u in urls)
        print(f"{'request':<{width}}  {'action':<7} {'category':<12} rule")
        valid = []
        for url in urls:
            try:
                verdict = sieve.check(url)
            except InvalidURL as exc:
                print(f"{url:<{width}}  {'invalid':<7} {'-':<12} {exc.reason}")
                continue
            valid.append(url)
            rule = verdict.rule
            where = "-" if rule is None else f"{rule.pattern!r} ({_relative(rule.where, lists)})"
            category = verdict.category or "-"
            print(f"{url:<{width}}  {verdict.action:<7} {category:<12} {where}")

        spec = args.store
        if spec is None:
            spec = f"exact:{stack.enter_context(tempfile.TemporaryDirectory())}/demo.exact"
        store = stack.enter_context(open_seen(spec))
        new = store.add_many(valid)
        print(
            f"\nDe-duplicating the {len(valid)} valid requests in {spec}: "
            f"{sum(new)} distinct URLs, {len(valid) - sum(new)} repeats in other spellings."
        )
        state = report()
        slow = state.slow_path()
        if slow is None:
            print(
                f"\nEngine: compiled, every path (scan {state.scan}); urlsieve doctor lists them."
            )
        else:
            print(f"\nEngine: {slow}")
        print("\nNext: urlsieve filter --lists DIR < urls.txt")
        print("      urlsieve dedup --store SPEC < urls.txt")
    return 0
