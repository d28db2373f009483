"""An administrator's rules with a small overlay of learned rules beside them.

The self-learning gateway (:mod:`urlsieve.learn`) writes what it learns into its own
small snapshot, the *overlay*, recompiled in milliseconds whatever the size of the
base lists. :class:`LayeredFilter` asks the base first; only a URL no base rule decides
is looked up in the overlay. So an administrator's list always beats a learned rule
(a learned rule is only ever made for a URL the base left undecided), and the most
specific rule wins within each layer.

A URL neither layer decides is *unknown* (``Verdict.action == "none"``, rule id -1):
the gateway's ``unknown`` setting says what happens to it.

Rule ids of the overlay are offset by :data:`OVERLAY_IDS`, so one id names one rule
across both layers.

The overlay is looked up under the learner's form of a URL with a query
(:func:`learned_form`: the crawler profile sorts the query and drops tracking
parameters), the form its rules are written from: every spelling the learner counts as
one page (``?b=2&a=1``, ``?a=1&b=2&utm_source=x``) gets that page's verdict, instead of
staying unknown (allowed first-time, forever, since the queue has seen that page).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import overload

from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Categories, Filter
from urlsieve.match.base import Explanation, Verdict
from urlsieve.match.snapshot import CompiledImage
from urlsieve.rules.model import NONE, Rule
from urlsieve.url import CRAWLER, URL, canonicalize, parse_url

__all__ = ["OVERLAY_IDS", "LayeredFilter", "learned_evidence", "learned_form"]

#: Overlay rule ids start here (far above any base snapshot's rule count).
OVERLAY_IDS = 1 << 48


@overload
def learned_form(url: str) -> str: ...
@overload
def learned_form(url: URL) -> str | URL: ...
def learned_form(url: str | URL) -> str | URL:
    """``url`` as the overlay is looked up: a URL with a query in the crawler profile's
    canonical form (the learner's job URL, which its rule keys come from); any other URL
    as it is (the two profiles differ only in the query and the port, which a rule does
    not carry); a URL that does not parse as it is (the lookup reports it)."""
    if isinstance(url, URL):
        if url.query is None:
            return url
        text = url.canonical
    elif "?" not in url:
        return url
    else:
        text = url
    try:
        return canonicalize(text, profile=CRAWLER)
    except InvalidURL:
        return url


def _learned_any(url: str | bytes | URL) -> str | bytes | URL:
    """:func:`learned_form` for the batch lookups that also take bytes."""
    if isinstance(url, bytes):
        if b"?" not in url:
            return url
        try:
            return canonicalize(url, profile=CRAWLER)
        except InvalidURL:
            return url
    return learned_form(url)


def _plain_host(url: str) -> str | None:
    """The host of ``url`` when it is spelled plainly (ASCII letters, digits, ``-``, ``.``,
    ``_``; userinfo, port and a trailing dot allowed): the canonical host then is its
    lower-case form without the trailing dot. None for anything else (escapes, IDN, IP
    literals in other spellings, blanks, backslashes), which the caller canonicalises."""
    if "\\" in url or not url.isascii():
        return None
    rest = url.split("://", 1)[1] if "://" in url else url
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    host = authority.rpartition("@")[2]
    host, _, port = host.partition(":")
    host = host.lower().rstrip(".")
    if not host or not _PLAIN_HOST.fullmatch(host) or (port and not port.isdigit()):
        return None
    return host


#: A host name the canonicaliser leaves as it is once lower-cased (last label not numeric).
_PLAIN_HOST = re.compile(r"(?:[a-z0-9_-]+\.)*[a-z][a-z0-9_-]*")


#: Longest provenance comment read back (the learner writes far shorter ones).
_MAX_EVIDENCE = 4096


def learned_evidence(rule: Rule) -> str | None:
    """The provenance comment the learner wrote above ``rule`` in its learned list
    (``learned block category=… score=… phrases=… note=…``: see
    :meth:`urlsieve.learn.verdicts.Learned.provenance`), or None when there is none (a
    rule made in code, a file gone or changed since)."""
    if rule.source is None or rule.line is None or rule.line < 2:
        return None
    try:
        with open(rule.source, encoding="utf-8", errors="replace") as fh:
            previous = ""
            for number, text in enumerate(fh, 1):
                if number == rule.line:
                    break
                previous = text
            else:
                return None
    except OSError:
        return None
    previous = previous.strip()
    if not previous.startswith("#"):
        return None
    return previous.lstrip("# ")[:_MAX_EVIDENCE] or None


def _clean_domains(overlay: Filter | None) -> frozenset[str]:
    """The ``clean_domains`` of an overlay snapshot's metadata (anything else: none)."""
    info = overlay.info if overlay is not None else None
    found = info.meta.get("clean_domains") if info is not None else None
    if not isinstance(found, list):
        return frozenset()
    return frozenset(d for d in found if isinstance(d, str))


class LayeredFilter(Filter):
    """``base``'s verdicts, and ``overlay``'s where the base has no rule.

    Categories chosen per call apply to the base only: the overlay's categories are the
    learned ones, enforced whenever learning is on.
    """

    def __init__(self, base: Filter, overlay: Filter | None) -> None:
        super().__init__(base.matcher, load=base._load, categories=base.selected)
        self.base = base
        self.overlay = overlay
        # Hosts with a learned rule that carries a query: only their URLs need the
        # learner's form (canonicalising every undecided URL with a query costs ~15 µs).
        rules = overlay.rules if overlay is not None else []
        self._query_hosts = frozenset(r.host for r in rules if r.query is not None)
        self._query_ips = any(r.is_ip for r in rules if r.query is not None)
        #: Sites the learner knows clean (:func:`urlsieve.learn.overlay.clean_domains`):
        #: the gateway lets their new pages pass without the burst cap.
        self.clean_domains: frozenset[str] = _clean_domains(overlay)

    @overload
    def _form(self, url: str) -> str: ...
    @overload
    def _form(self, url: URL) -> str | URL: ...
    def _form(self, url: str | URL) -> str | URL:
        """``url`` for the overlay: :func:`learned_form` when a rule with a query may be
        on its host (any host spelled in an unusual way is canonicalised to find out)."""
        if not self._query_hosts:
            return url
        if isinstance(url, URL):
            return learned_form(url) if url.host in self._query_hosts else url
        if "?" not in url:
            return url
        host = None if self._query_ips else _plain_host(url)
        return url if host is not None and host not in self._query_hosts else learned_form(url)

    def _form_any(self, url: str | bytes | URL) -> str | bytes | URL:
        if isinstance(url, bytes):
            return _learned_any(url) if self._query_hosts else url
        return self._form(url)

    @property
    def compiled(self) -> CompiledImage | None:
        """The base's image: a URL it leaves undecided is the overlay's to decide."""
        base = self.base.compiled
        return None if base is None else base._replace(complete=self.overlay is None)

    def select(self, categories: Categories) -> Filter:
        return LayeredFilter(self.base.select(categories), self.overlay)

    def close(self) -> None:
        self.base.close()
        if self.overlay is not None:
            self.overlay.close()

    def __len__(self) -> int:
        return len(self.base) + (len(self.overlay) if self.overlay is not None else 0)

    def check(self, url: str | URL, categories: Categories = None) -> Verdict:
        verdict = self.base.check(url, categories)
        if verdict.action != NONE or self.overlay is None:  # (no rule built to know it)
            return verdict
        learned = self.overlay.check(self._form(url))
        return learned if learned.action != NONE else verdict

    def match(self, url: URL, categories: Categories = None) -> Rule | None:
        rule = self.base.match(url, categories)
        if rule is not None or self.overlay is None:
            return rule
        form = self._form(url)
        return self.overlay.match(form if isinstance(form, URL) else parse_url(form))

    def check_many(self, urls: Iterable[str | URL], categories: Categories = None) -> list[Verdict]:
        urls = list(urls)
        verdicts = self.base.check_many(urls, categories)
        if self.overlay is None:
            return verdicts
        undecided = [at for at, v in enumerate(verdicts) if v.action == NONE]
        if undecided:
            learned = self.overlay.check_many([self._form(urls[at]) for at in undecided])
            for at, verdict in zip(undecided, learned, strict=True):
                if verdict.action != NONE:
                    verdicts[at] = verdict
        return verdicts

    def match_many(
        self, urls: Sequence[str | bytes | URL], categories: Categories = None
    ) -> list[Rule | InvalidURL | None]:
        found = self.base.match_many(urls, categories)
        if self.overlay is None:
            return found
        undecided = [at for at, r in enumerate(found) if r is None]
        if undecided:
            learned = self.overlay.match_many([self._form_any(urls[at]) for at in undecided])
            for at, rule in zip(undecided, learned, strict=True):
                if isinstance(rule, Rule):
                    found[at] = rule
        return found

    def decide_ids(
        self, urls: Sequence[str], categories: Categories = None
    ) -> list[int | InvalidURL]:
        ids = self.base.decide_ids(urls, categories)
        if self.overlay is None:
            return ids
        undecided = [at for at, r in enumerate(ids) if r == -1]
        if undecided:
            learned = self.overlay.decide_ids([self._form(urls[at]) for at in undecided])
            for at, rule_id in zip(undecided, learned, strict=True):
                if type(rule_id) is int and rule_id >= 0:
                    ids[at] = rule_id + OVERLAY_IDS
        return ids

    def provenance(self, rule_id: int) -> tuple[str, str, str | None, int | None]:
        if rule_id >= OVERLAY_IDS and self.overlay is not None:
            return self.overlay.provenance(rule_id - OVERLAY_IDS)
        return self.base.provenance(rule_id)

    def rule(self, rule_id: int) -> Rule:
        if rule_id >= OVERLAY_IDS and self.overlay is not None:
            return self.overlay.rule(rule_id - OVERLAY_IDS)
        return self.base.rule(rule_id)

    def explain(self, url: str | URL, categories: Categories = None) -> Explanation:
        explanation = self.base.explain(url, categories)
        if explanation.rule is not None or self.overlay is None:
            return explanation
        learned = self.overlay.explain(self._form(url))
        probes = [*explanation.probes, *(f"(learned) {p}" for p in learned.probes)]
        evidence = None if learned.rule is None else learned_evidence(learned.rule)
        return Explanation(
            explanation.url,
            explanation.canonical,
            learned.verdict,
            probes,
            explanation.matching,
            evidence,
        )
