"""Review and override what the gateway learned: one implementation for the command line
(``urlsieve learn list|show|allow|block|forget``) and the service (``/v1/learn/*``).

:class:`LearnAdmin` keeps the verdict store open and does each operation the same way
for both callers: it checks an override before storing it (a URL with a usable host, a
rule the lists can hold, a category that is one directory name, a note of printable
text), stores it (an override is never replaced by a later learned verdict: see
:meth:`VerdictStore.put`) and rebuilds the overlay snapshot at once, so a gateway
watching the snapshot enforces it within its reload check. Writes are serialised: two
overrides at once never interleave their rebuilds.

It implements :class:`urlsieve.gateway.learning.LearnReview` (the service's protocol),
which is why its answers are JSON-ready dicts. Input it refuses raises a
:class:`ValueError` (:class:`InvalidURL`, :class:`RuleSyntaxError`); a store it cannot
use raises :class:`LearnError`.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from urlsieve.exceptions import InvalidURL, RuleSyntaxError
from urlsieve.learn.config import LearnSettings
from urlsieve.learn.overlay import (
    RESOURCE,
    build_overlay,
    rendered_resources,
    rule_line,
    site_report,
)
from urlsieve.learn.verdicts import SOURCES, Learned, open_verdicts, rule_key
from urlsieve.rules.categories import resolve
from urlsieve.rules.model import Rule, parse_rule

__all__ = [
    "ALLOW_CATEGORY",
    "DEFAULT_BLOCK_CATEGORY",
    "MAX_CATEGORY",
    "MAX_NOTE",
    "MAX_URL",
    "LearnAdmin",
    "check_category",
    "check_note",
    "check_url",
    "make_override",
    "verdict_dict",
]

#: Longest URL (characters) an override or a look-up takes (the gateway's unknown-URL cap).
MAX_URL = 8192
#: Longest category: one directory name in the learned tree (see ``category_directory``).
MAX_CATEGORY = 60
#: Longest note kept with an override.
MAX_NOTE = 1000
#: The category ``learn block`` uses when none is given.
DEFAULT_BLOCK_CATEGORY = "blocked"
#: The category every ``learn allow`` is listed under.
ALLOW_CATEGORY = "override"

#: C0 and C1 controls and DEL: never part of a URL, category or note.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _text(value: object, what: str, limit: int, error: type[ValueError]) -> str:
    """``value`` as checked text: a string of at most ``limit`` characters, valid Unicode,
    no control character; else ``error`` saying which and where."""

    def bad(reason: str) -> ValueError:
        if error is InvalidURL:
            return InvalidURL(f"{what}: {reason}")
        return RuleSyntaxError(reason, what)

    if not isinstance(value, str):
        raise bad(f"must be text, not {type(value).__name__}")
    if len(value) > limit:
        raise bad(f"{len(value)} characters (at most {limit})")
    found = _CONTROL.search(value)
    if found:
        raise bad(f"control character U+{ord(found.group()):04X} at offset {found.start()}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise bad(f"not valid Unicode (a lone surrogate at offset {exc.start})") from None
    return value


def check_url(url: object) -> str:
    """``url`` as an override or a look-up takes it, or :class:`InvalidURL` saying why."""
    text = _text(url, "url", MAX_URL, InvalidURL)
    if not text.strip():
        raise InvalidURL("url: empty (give a URL, or a host name for the whole host)")
    return text


def check_category(category: object) -> str:
    """A block override's category: one directory name of the learned tree (no path
    separator, not dot-led, no blank or control character, at most 60 characters), or
    :class:`RuleSyntaxError` saying why."""
    text = _text(category, "category", MAX_CATEGORY, RuleSyntaxError)
    if not text:
        raise RuleSyntaxError("empty", "category")
    if text.startswith(".") or any(c in "/\\" or c.isspace() for c in text):
        raise RuleSyntaxError(
            f"{text!r} is not one directory name (no '/', '\\', blank, or leading '.')",
            "category",
        )
    return text


def check_note(note: object) -> str:
    """An override's note: printable text of at most 1000 characters."""
    return _text(note, "note", MAX_NOTE, RuleSyntaxError)


def make_override(url: str, action: str, category: str | None, note: str = "") -> Learned:
    """The override verdict for ``url`` (a bare host name: the whole host), checked:
    :class:`InvalidURL` for a URL without a usable host, :class:`RuleSyntaxError` for a
    rule the lists cannot hold (a top-level domain), a bad category or note."""
    if action not in ("allow", "block"):
        raise RuleSyntaxError(f"action must be 'allow' or 'block', not {action!r}", "override")
    url = check_url(url)
    if action == "block":
        category = check_category(DEFAULT_BLOCK_CATEGORY if category is None else category)
    elif category is not None and category != ALLOW_CATEGORY:
        raise RuleSyntaxError("an allow override takes no category", "category")
    else:
        category = ALLOW_CATEGORY
    note = check_note(note)
    key, host = rule_key(url)
    override = Learned(
        key=key,
        host=host,
        action=action,
        category=category,
        source="override",
        url=url,
        note=note,
    )
    # What the lists cannot hold (a top-level domain) is refused here, not skipped later.
    parse_rule(rule_line(override), action, category, f"learn {action}")
    return override


def verdict_dict(verdict: Learned) -> dict[str, Any]:
    """One verdict as JSON-ready data (what ``learn show`` prints, what the service sends)."""
    return {
        "key": verdict.key,
        "host": verdict.host,
        "is_host": verdict.is_host,
        "action": verdict.action,
        "category": verdict.category,
        "source": verdict.source,
        "score": verdict.score,
        "evidence": [
            {"phrase": phrase, "weight": weight, "count": count}
            for phrase, weight, count in verdict.evidence
        ],
        "url": verdict.url,
        "final_url": verdict.final_url,
        "content_hash": verdict.content_hash,
        "fetched_at": verdict.fetched_at,
        "first_seen": verdict.first_seen,
        "decided_at": verdict.decided_at,
        "note": verdict.note,
    }


def _rule_verdict(rule: Rule, key: str, source: str) -> Learned:
    """A verdict read back from an overlay rule and the provenance comment above it in the
    learned tree (for what has no row of its own: a promoted host)."""
    from urlsieve.layered import learned_evidence

    evidence = learned_evidence(rule) or ""
    score = re.search(r"\bscore=(-?\d+)", evidence)
    return Learned(
        key=key,
        host=rule.host,
        action=rule.action,
        category=rule.category,
        source=source,
        score=int(score.group(1)) if score else 0,
        note=evidence,
    )


class LearnAdmin:
    """The learned verdicts of one gateway, for review and override (see the module)."""

    def __init__(
        self,
        settings: LearnSettings,
        *,
        list_categories: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``list_categories``: the category names of the gateway's own lists (the
        assembly room passes :func:`urlsieve.config.configured_category_names` of the
        file; None: no lists known, categories are kept as written)."""
        self.settings = settings
        settings.directory.mkdir(parents=True, exist_ok=True)
        self.store = open_verdicts(settings.verdicts_spec)
        self._write_lock = threading.Lock()
        self._read_list_categories = list_categories
        self._list_categories: frozenset[str] | None = None

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> LearnAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------

    def verdicts(self, source: str | None = None, action: str | None = None) -> Iterator[Learned]:
        """Every verdict (by host, then rule), of one source and one action when given (a
        resource's as its site decides it now)."""
        if source is not None and source not in SOURCES:
            raise RuleSyntaxError(f"source must be one of {', '.join(SOURCES)}", "source")
        stored = list(self.store.all(source=source))
        rendered = {}  # a resource's verdict is its site's, as the overlay build renders it
        if any(v.category == RESOURCE for v in stored):
            rendered = rendered_resources(self.store.all(), self.settings.promote_after)
        for row in stored:
            verdict = rendered.get(row.key, row) if row.category == RESOURCE else row
            if action is None or verdict.action == action:
                yield verdict

    def list(
        self, source: str | None, action: str | None, limit: int, offset: int
    ) -> builtins.list[dict[str, Any]]:
        if limit < 0 or offset < 0:
            raise RuleSyntaxError("limit and offset must not be negative", "list")
        page = itertools.islice(self.verdicts(source, action), offset, offset + limit)
        return [verdict_dict(v) for v in page]

    def find(self, url: str) -> Learned | None:
        """The verdict for ``url``'s rule, else for its host, else the one the overlay
        enforces on it as the gateway looks it up (a query variant of a learned page, a
        page of a promoted host, the promoted host itself: a promoted host has no row of
        its own, its verdict is read back from its provenance comment in the learned
        tree); :class:`InvalidURL` for a URL without a usable host."""
        key, host = rule_key(check_url(url))
        found = self.store.get(key) or self.store.get(host) or self._enforced(url)
        if found is not None and found.category == RESOURCE and not found.is_host:
            # A resource's verdict is its site's, rendered as the overlay build renders it.
            rendered = rendered_resources(self.store.all(), self.settings.promote_after)
            return rendered.get(found.key, found)
        return found

    def _enforced(self, url: str) -> Learned | None:
        from urlsieve.filter import Filter
        from urlsieve.layered import learned_form

        overlay = self.settings.overlay
        if not overlay.exists():
            return None
        target = url if "://" in url else f"http://{url}/" if "/" not in url else f"http://{url}"
        flt = Filter.load(overlay)
        try:
            rule = flt.check(learned_form(target)).rule
        except InvalidURL:
            return None
        finally:
            flt.close()
        if rule is None:
            return None
        pattern = rule.pattern
        key = pattern[1:-1] if pattern.startswith("=") and pattern.endswith("|") else pattern
        stored = self.store.get(key)
        if stored is not None:
            return stored
        found = _rule_verdict(rule, key, "learned")
        return dataclasses.replace(found, url=url, note=f"{found.note} (rule {rule.where})")

    def promoted(self) -> builtins.list[Learned]:
        """The hosts the overlay blocks or allows whole without a row of their own (promoted
        by the learner), read back from the learned tree."""
        from urlsieve.filter import Filter

        overlay = self.settings.overlay
        if not overlay.exists():
            return []
        flt = Filter.load(overlay)
        try:
            hosts = [r for r in flt.rules if "/" not in r.pattern and "=" not in r.pattern]
        finally:
            flt.close()
        return [
            _rule_verdict(rule, rule.pattern, "promoted")
            for rule in sorted(hosts, key=lambda r: r.pattern)
            # an operator's host override is listed with the verdicts
            if self.store.get(rule.pattern) is None
        ]

    def refusal(self, url: str) -> str | None:
        """Why the crawler would not fetch ``url`` (its address or port, naming the setting
        that would allow it), or None: the guard's checks as the crawler makes them."""
        import asyncio

        from urlsieve.learn.crawl import CrawlSettings
        from urlsieve.learn.guard import AddressRefused, Guard, GuardedResolver
        from urlsieve.url import parse_url

        crawl = CrawlSettings(**self.settings.crawl)
        try:
            parsed = parse_url(url if "://" in url else f"http://{url}/")
        except InvalidURL as exc:
            return f"not a URL the crawler reads: {exc.reason}"
        guard = Guard(crawl.allow_networks, crawl.ports)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        literal = guard.literal(parsed.host)
        if literal is not None:
            return guard.check_host(parsed.host) or guard.check_port(parsed.host, port, [literal])

        async def resolve() -> str | None:
            resolver = GuardedResolver(guard, hosts=crawl.hosts)
            try:
                await resolver.resolve(parsed.host, port)
            except AddressRefused as exc:
                return exc.reason
            except OSError:
                return None  # no address: the crawler says so when it tries
            finally:
                await resolver.close()
            return None

        return asyncio.run(resolve())

    def site(self, url: str) -> dict[str, Any]:
        """What is learned of ``url``'s site (its registrable domain): the domain's verdict
        (an operator's, or promoted from its pages), ``known clean``, or ``unknown``, and
        the pages that decide otherwise (:func:`~urlsieve.learn.overlay.site_report`)."""
        _key, host = rule_key(check_url(url))
        return site_report(self.store.all(), host, self.settings.promote_after)

    def show(self, url: str) -> dict[str, Any] | None:
        found = self.find(url)
        return None if found is None else verdict_dict(found)

    # -- writing -----------------------------------------------------------------------

    def rebuild(self) -> tuple[int, float]:
        """Rebuild the overlay snapshot from the store: (rules, seconds)."""
        s = self.settings
        built = build_overlay(self.store, s.tree, s.overlay, promote_after=s.promote_after)
        return built.rules, built.seconds

    def list_categories(self) -> frozenset[str]:
        """The category names of the gateway's own lists, read once (none when the
        configuration has no lists or they cannot be read: names stay as written)."""
        if self._list_categories is None:
            found: Iterable[str] = ()
            if self._read_list_categories is not None:
                try:
                    found = self._read_list_categories()
                except Exception:  # an override needs no lists; only the spelling is at stake
                    found = ()
            self._list_categories = frozenset(found)
        return self._list_categories

    def override(self, url: str, action: str, category: str | None, note: str) -> dict[str, Any]:
        """Allow or block ``url`` whatever is learned. A block's category is spelled as the
        gateway's lists spell it when it names one of theirs ignoring case (``Gambling`` is
        UT1's ``gambling``); another name is a category of its own."""
        if action == "block" and isinstance(category, str):
            category = resolve(category, self.list_categories()) or category
        verdict = make_override(url, action, category, note)
        with self._write_lock:
            self.store.put([verdict])
            rules, seconds = self.rebuild()
        stored = self.store.get(verdict.key) or verdict
        return {**verdict_dict(stored), "overlay_rules": rules, "overlay_seconds": seconds}

    def forget(self, url: str) -> bool:
        key, _host = rule_key(check_url(url))
        with self._write_lock:
            gone = self.store.forget([key])
            self.rebuild()
        return gone > 0
