"""The page classifier: phrase lists in one Aho-Corasick automaton, scored as E2Guardian.

Every term of every list (weighted, banned, exception, lexicon; combination parts too) is
one pattern of a single ``ahocorasick_rs`` automaton over normalised text, scanned once
per page with overlapping matches (``online casino`` and ``casino`` both count). A term
with word boundaries (``< casino >``) only counts where the characters around the match
are not word characters (letters, digits, ``_``); the check looks at two characters per
match, there is no second pass.

Scoring follows E2Guardian 5.3 (``NaughtyFilter::checkphrase``), checked against the real
binary by ``tests/learn/test_e2guardian_oracle.py``:

* a weighted phrase counts **once per page** (E2Guardian's shipped
  ``weightedphrasemode = 2``); ``per_occurrence=True`` counts every occurrence (mode 1);
  a combination counts when all its terms are present (once, or the fewest occurrences
  of its terms);
* the score is the sum over **all** categories, negative weights included, and the page
  is blocked when it is **greater than** the limit (a score equal to the limit passes).
  On top of E2Guardian, ``limits`` gives a category its own limit, compared with that
  category's score (its own negative weights included);
* a banned phrase blocks whatever the score; an exception phrase allows whatever else is
  on the page — **the exception wins** over banned phrases, as in E2Guardian;
* the same phrase listed twice counts once: the first weighted entry loaded wins (the
  weighted lists are read before the lexicons, so an explicit weight beats a default).

Before matching, letter-spaced words are joined where they spell a listed term
(:meth:`Classifier.join_spaced`): ``c a s i n o``, ``c.a.s.i.n.o``, ``o-n-l-i-n-e c-a-s-i-n-o``
become ``casino`` and ``online casino`` when those are terms (of three letters or more);
single letters that spell no term are left as they are, so other text is not changed.
It works on ASCII letters and digits (look-alike letters are ASCII by then, see
:func:`urlsieve.learn.text.unconfuse`), and a page without two single letters in a row
is not searched (a byte translation and a ``find``).

Hostile input never raises: bytes are decoded with replacement characters, only the
first ``max_bytes`` of a body and the first ``max_chars`` characters of its text are
scanned (the rest is ignored and ``truncated`` says so: pages put what they are about
first, and a classifier that reads 100 MB pages is a denial of service).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import ahocorasick_rs

from urlsieve.learn.page import Page
from urlsieve.learn.phrases import Phrase, PhraseSet
from urlsieve.learn.text import decode, html_text, is_html, normalise, stream_charset

__all__ = [
    "MAX_BYTES",
    "MAX_CHARS",
    "MAX_SCAN_BYTES",
    "Classification",
    "Classifier",
    "Hit",
    "PageScan",
]

#: Bytes of a body decoded in one piece (a longer body is read in segments of this size).
MAX_BYTES = 1024 * 1024
#: Characters of text in one segment (and of normalised text scanned per segment).
MAX_CHARS = 1024 * 1024
#: Bytes of a body classified at all: past this, the page is ``truncated``.
MAX_SCAN_BYTES = 32 * 1024 * 1024
#: Offsets kept per hit.
MAX_OFFSETS = 5

PageAction = Literal["block", "allow"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One list entry found on the page. ``count`` is how often (for a combination, its
    rarest term); ``offsets`` the first character offsets of its first term in the
    normalised text (letter-spaced terms joined); ``contribution`` what it added to the score."""

    phrase: str
    kind: str
    category: str | None
    weight: int
    count: int
    contribution: int
    offsets: tuple[int, ...]
    source: str
    line: int


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one page, with the evidence that decided it."""

    verdict: PageAction
    category: str | None
    score: int
    scores: Mapping[str, int]
    reason: str
    evidence: tuple[Hit, ...]
    charset: str
    chars: int
    truncated: bool = False

    @property
    def blocked(self) -> bool:
        return self.verdict == "block"


@dataclass(slots=True)
class _Counts:
    count: int = 0
    offsets: list[int] = field(default_factory=list)


_KIND_ORDER = {"exception": 0, "banned": 1, "weighted": 2}


def _is_word(char: str) -> bool:
    """Whether ``char`` is a word character for ``< word >`` boundaries (as regex ``\\w``)."""
    return char.isalnum() or char == "_"


#: Whether each ASCII byte is a word character.
_ASCII_WORD = tuple(_is_word(chr(byte)) for byte in range(0x80))
# Bytes that are not UTF-8 continuation bytes (0x80-0xBF): one per character.
_CHAR_STARTS = bytes([*range(0x80), *range(0xC0, 0x100)])


def _word_before(data: bytes, end: int) -> bool:
    """Whether the (non-ASCII) character of UTF-8 ``data`` ending at ``end`` is a word
    character."""
    start = end - 1
    while start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1
    return _is_word(data[start:end].decode("utf-8", "replace"))


def _word_at(data: bytes, start: int) -> bool:
    """Whether the (non-ASCII) character of UTF-8 ``data`` starting at ``start`` is a word
    character."""
    end = start + 1
    while end < len(data) and data[end] & 0xC0 == 0x80:
        end += 1
    return _is_word(data[start:end].decode("utf-8", "replace"))


def _char_offsets(data: bytes, offsets: Iterable[list[int]], multibyte: bool) -> Mapping[int, int]:
    """The character offset of each byte offset in ``offsets`` (character starts in UTF-8
    ``data``): the byte offset less the continuation bytes before it, counted once over
    the stretches between the sorted offsets."""
    wanted = sorted({offset for some in offsets for offset in some})
    if not multibyte:
        return {offset: offset for offset in wanted}
    chars: dict[int, int] = {}
    previous = count = 0
    for offset in wanted:
        count += len(data[previous:offset].translate(None, _CHAR_STARTS))
        chars[offset] = offset - count
        previous = offset
    return chars


#: What may separate the letters of a letter-spaced word (one or two of them).
SPACERS = " .*-_|/+~"
# A run of three or more single ASCII letters or digits, one or two spacers apart.
_SPACED = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z0-9](?:["
    + re.escape(SPACERS)
    + r"]{1,2}[A-Za-z0-9](?![A-Za-z0-9])){2,}"
)
# The prefilter: each byte as "a" (ASCII letter or digit), "s" (spacer) or "x"; a run of
# single letters holds "sasas" once spacer pairs are one.
_CLASSES = bytes(
    ord("a")
    if chr(b).isascii() and chr(b).isalnum()
    else ord("s")
    if chr(b) in SPACERS
    else ord("x")
    for b in range(256)
)


class Classifier:
    """Classifies pages with one :class:`PhraseSet`; immutable after construction, so one
    instance serves any number of threads."""

    def __init__(
        self,
        phrases: PhraseSet,
        *,
        limit: int = 50,
        limits: Mapping[str, int] | None = None,
        per_occurrence: bool = False,
        max_bytes: int = MAX_BYTES,
        max_chars: int = MAX_CHARS,
        max_scan_bytes: int = MAX_SCAN_BYTES,
    ) -> None:
        self.limit = limit
        self.limits = MappingProxyType(dict(limits or {}))
        self.per_occurrence = per_occurrence
        self.max_bytes = max_bytes
        self.max_chars = max_chars
        self.max_scan_bytes = max(max_scan_bytes, max_bytes)
        self.phrases = self._dedupe(phrases.phrases)
        terms: dict[tuple[str, bool, bool], int] = {}
        self._phrase_terms: list[tuple[int, ...]] = []
        for phrase in self.phrases:
            ids = tuple(
                terms.setdefault((t.text, t.left, t.right), len(terms)) for t in phrase.terms
            )
            self._phrase_terms.append(ids)
        # A phrase is looked at only when its first term is on the page.
        by_first: dict[int, list[int]] = {}
        for number, ids in enumerate(self._phrase_terms):
            by_first.setdefault(ids[0], []).append(number)
        self._by_first = {term: tuple(numbers) for term, numbers in by_first.items()}
        patterns: dict[str, int] = {}
        checks: list[list[tuple[int, bool, bool]]] = []
        for (text, left, right), term_id in terms.items():
            index = patterns.setdefault(text, len(patterns))
            if index == len(checks):
                checks.append([])
            checks[index].append((term_id, left, right))
        self._terms = len(terms)
        self._patterns = tuple(patterns)
        #: Bytes of normalised text a segment of a long page carries into the next, so a
        #: phrase across the cut is found (and its left neighbour seen): the longest pattern
        #: and one more character.
        self._reach = max((len(p.encode()) for p in patterns), default=0) + 1
        self._checks = tuple(tuple(c) for c in checks)
        # Over the UTF-8 bytes of the text: the str automaton does the same work and then
        # maps every byte offset to a character offset (an 8-byte entry per byte of text);
        # _match converts the few offsets it keeps itself.
        self._automaton = (
            ahocorasick_rs.BytesAhoCorasick(
                [pattern.encode() for pattern in patterns],
                matchkind=ahocorasick_rs.MATCHKIND_STANDARD,
                implementation=ahocorasick_rs.Implementation.DFA,
            )
            if patterns
            else None
        )

        # Letter-spaced terms: each term of three or more ASCII letters and digits (blanks
        # between words allowed), spelled without its blanks -> the term.
        spelled: dict[str, str] = {}
        for pattern in patterns:
            joined = pattern.replace(" ", "")
            if len(joined) >= 3 and joined.isascii() and joined.isalnum():
                spelled.setdefault(joined, pattern)
        self._spelled = tuple(spelled.values())
        self._spelled_automaton = (
            ahocorasick_rs.AhoCorasick(
                list(spelled), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_LONGEST
            )
            if spelled
            else None
        )

    @staticmethod
    def _dedupe(phrases: tuple[Phrase, ...]) -> tuple[Phrase, ...]:
        seen: set[tuple[object, ...]] = set()
        kept = []
        for phrase in phrases:
            key = (phrase.kind, phrase.terms)
            if key not in seen:
                seen.add(key)
                kept.append(phrase)
        return tuple(kept)

    # -- entry points -------------------------------------------------------------------

    def classify_page(self, page: Page) -> Classification:
        """Classify a fetched page (its body with its Content-Type)."""
        return self.classify_body(page.body, page.content_type, truncated=page.truncated)

    def classify_body(
        self, body: bytes, content_type: str | None = None, *, truncated: bool = False
    ) -> Classification:
        """Decode, extract (HTML or plain text), normalise, match and score ``body`` (the
        first ``max_scan_bytes`` of it; a longer body in segments, as :meth:`scan` does)."""
        scan = self.scan(content_type)
        scan.feed(body)
        return scan.finish(complete=not truncated)

    def scan(self, content_type: str | None = None) -> PageScan:
        """A page classified as its bytes come (:class:`PageScan`)."""
        return PageScan(self, content_type)

    def classify_text(self, text: str) -> Classification:
        """Classify already extracted text (it is normalised here)."""
        return self._classify(text, "", False)

    # -- the work ------------------------------------------------------------------------

    def _classify(self, text: str, charset: str, truncated: bool) -> Classification:
        # Cut before normalising too (normalisation is linear, but why pay for the tail).
        if len(text) > self.max_chars:
            text, truncated = text[: self.max_chars], True
        text = normalise(text)
        if len(text) > self.max_chars:
            text, truncated = text[: self.max_chars], True
        counts = self._match(self.join_spaced(text))
        return self._score(counts, charset, len(text), truncated)

    def join_spaced(self, text: str) -> str:
        """``text`` (normalised) with its letter-spaced terms joined (see the module
        docstring); linear in ``text``, never longer."""
        if self._spelled_automaton is None:
            return text
        classes = (b"s" + text.encode("utf-8", "replace").translate(_CLASSES) + b"s").replace(
            b"ss", b"s"
        )
        if b"sasas" not in classes:
            return text
        return _SPACED.sub(self._join_run, text)

    def _join_run(self, run: re.Match[str]) -> str:
        letters = "".join(char for char in run.group() if char not in SPACERS)
        pieces: list[str] = []
        at = 0
        assert self._spelled_automaton is not None
        for index, start, end in self._spelled_automaton.find_matches_as_indexes(letters):
            pieces += letters[at:start]
            pieces.append(self._spelled[index])
            at = end
        if not pieces:
            return run.group()
        pieces += letters[at:]
        return " ".join(pieces)

    def _match(self, text: str) -> dict[int, _Counts]:
        """Count the terms on ``text``: one pass of the automaton over its UTF-8 bytes
        (the same matches, in the same order, as over its characters), boundaries checked
        on the bytes, the offsets kept turned into character offsets at the end."""
        found: dict[int, _Counts] = {}
        if self._automaton is None or not text:
            return found
        # "replace": a lone surrogate (only classify_text can be given one) becomes "?",
        # one character for one, so character offsets stay right.
        data = text.encode("utf-8", "replace")
        counts: dict[int, int] = {}
        offsets: dict[int, list[int]] = {}
        self._count(data, 0, counts, offsets)
        to_chars = _char_offsets(data, offsets.values(), len(data) != len(text))
        for term_id, count in counts.items():
            found[term_id] = _Counts(count, [to_chars[offset] for offset in offsets[term_id]])
        return found

    def _count(
        self, data: bytes, skip: int, counts: dict[int, int], offsets: dict[int, list[int]]
    ) -> None:
        """Add the terms found in UTF-8 ``data`` that end past byte ``skip`` to ``counts``
        (and the byte offsets of the first :data:`MAX_OFFSETS` to ``offsets``)."""
        assert self._automaton is not None
        end_of_data = len(data)
        checks = self._checks
        ascii_word = _ASCII_WORD
        # The loop runs once per match (thousands per page): everything it touches is a
        # local, an ASCII neighbour is checked by a tuple look-up, counts are plain dicts.
        for index, start, end in self._automaton.find_matches_as_indexes(data, overlapping=True):
            if end <= skip:
                continue
            for term_id, left, right in checks[index]:
                if left and start:
                    byte = data[start - 1]
                    if ascii_word[byte] if byte < 0x80 else _word_before(data, start):
                        continue
                if right and end < end_of_data:
                    byte = data[end]
                    if ascii_word[byte] if byte < 0x80 else _word_at(data, end):
                        continue
                if term_id in counts:
                    seen = counts[term_id]
                    counts[term_id] = seen + 1
                    if seen < MAX_OFFSETS:
                        offsets[term_id].append(start)
                else:
                    counts[term_id] = 1
                    offsets[term_id] = [start]

    def _score(
        self, found: dict[int, _Counts], charset: str, chars: int, truncated: bool
    ) -> Classification:
        hits: list[Hit] = []
        scores: dict[str, int] = {}
        total = 0
        banned: Hit | None = None
        exception: Hit | None = None
        candidates = sorted(n for t in found for n in self._by_first.get(t, ()))
        for number in candidates:
            phrase, ids = self.phrases[number], self._phrase_terms[number]
            if not all(term_id in found for term_id in ids):
                continue
            count = min(found[term_id].count for term_id in ids)
            contribution = 0
            if phrase.kind == "weighted":
                contribution = phrase.weight * (count if self.per_occurrence else 1)
                total += contribution
                if phrase.category is not None:
                    scores[phrase.category] = scores.get(phrase.category, 0) + contribution
            hit = Hit(
                phrase=str(phrase),
                kind=phrase.kind,
                category=phrase.category,
                weight=phrase.weight,
                count=count,
                contribution=contribution,
                offsets=tuple(found[ids[0]].offsets),
                source=phrase.source,
                line=phrase.line,
            )
            hits.append(hit)
            if phrase.kind == "banned" and banned is None:
                banned = hit
            elif phrase.kind == "exception" and exception is None:
                exception = hit
        hits.sort(key=lambda h: (_KIND_ORDER[h.kind], -h.contribution, h.phrase))
        evidence = tuple(hits)
        frozen = MappingProxyType(scores)
        verdict: PageAction = "allow"
        category: str | None = None
        if exception is not None:
            reason = f"exception phrase {exception.phrase} ({exception.source}:{exception.line})"
        elif banned is not None:
            verdict, category = "block", banned.category
            reason = f"banned phrase {banned.phrase} ({banned.source}:{banned.line})"
        else:
            over = sorted(
                (c for c, s in scores.items() if c in self.limits and s > self.limits[c]),
                key=lambda c: (-scores[c], c),
            )
            top = sorted((c for c, s in scores.items() if s > 0), key=lambda c: (-scores[c], c))
            if over:
                verdict, category = "block", over[0]
                reason = f"{category} score {scores[category]} > its limit {self.limits[category]}"
            elif total > self.limit:
                verdict, category = "block", (top[0] if top else None)
                reason = f"score {total} > limit {self.limit}" + (
                    f" ({', '.join(f'{c} {scores[c]}' for c in top)})" if top else ""
                )
            else:
                reason = f"score {total} <= limit {self.limit}"
        return Classification(
            verdict=verdict,
            category=category,
            score=total,
            scores=frozen,
            reason=reason,
            evidence=evidence,
            charset=charset,
            chars=chars,
            truncated=truncated,
        )


# A raw-text element (its content is not text) or a comment, opened or closed.
_RAW_TEXT = re.compile(r"<(/?)(script|style|noscript|template)\b|(<!--)|(-->)", re.I)


def _open_raw(opener: str, html: str) -> str:
    """The raw-text element (``<script>``…) or comment (``<!--``) still open at the end of
    ``html``, a segment that began inside ``opener`` ("" for none)."""
    for found in _RAW_TEXT.finditer(html):
        closing, name, comment_open, comment_close = found.groups()
        if opener == "<!--":
            if comment_close:
                opener = ""
        elif opener:
            if closing and f"<{name.lower()}>" == opener:
                opener = ""
        elif comment_open:
            opener = "<!--"
        elif name and not closing:
            opener = f"<{name.lower()}>"
    return opener


class PageScan:
    """One page classified as its bytes come (:meth:`Classifier.scan`), with bounded memory:
    ``feed`` the decoded body in pieces of any size, then ``finish``.

    A body of at most ``max_bytes`` is classified as one piece, exactly as it always was.
    A longer one is read in segments: its charset is chosen on its first ``max_bytes``
    (BOM, header, ``<meta>``, valid UTF-8, detection), its text decoded incrementally and
    cut into segments of at most ``max_chars`` characters — after a ``>`` for HTML, at
    white space for text, where there is one in the segment's second half; an HTML
    segment cut inside a ``<script>``, ``<style>``, ``<noscript>``, ``<template>`` or a
    comment gives the next one that opener, so hidden text stays hidden. Each segment is
    extracted and normalised alone, the normalised segments are one text joined by single
    spaces, and the automaton runs over each with the end of the one before (the longest
    term's length) in front, so a phrase across a cut is found once. Where the cuts fall
    depends on the bytes only, never on how they were fed: the result is the same for any
    chunking (tested). Letter-spaced words are not joined across a cut. Memory: the
    segment in hand, the counts, and the bytes up to ``max_bytes`` before the charset is
    chosen. Bytes past ``max_scan_bytes`` are ignored and the result is ``truncated``.
    """

    def __init__(self, classifier: Classifier, content_type: str | None) -> None:
        self._classifier = classifier
        self._content_type = content_type
        self._head: list[bytes] = []  # the bytes before the charset is chosen
        self._head_size = 0
        self._decoder: codecs.IncrementalDecoder | None = None
        self._charset = ""
        self._html = False
        self._text: list[str] = []  # decoded text not yet cut into a segment
        self._text_chars = 0
        self._opener = ""
        self._tail = b""  # the end of the normalised text so far (UTF-8)
        self._chars = 0  # characters of the normalised text so far
        self._counts: dict[int, int] = {}
        self._offsets: dict[int, list[int]] = {}  # term -> character offsets
        self._fed = 0
        self._cut = False

    def feed(self, data: bytes) -> None:
        """The next bytes of the (decoded) body."""
        room = self._classifier.max_scan_bytes - self._fed
        if len(data) > room:
            data, self._cut = data[:room], True
        if not data:
            return
        self._fed += len(data)
        if self._decoder is None:
            self._head.append(data)
            self._head_size += len(data)
            if self._head_size > self._classifier.max_bytes:
                self._start()
            return
        self._take(self._decoder.decode(data))

    def finish(self, *, complete: bool = True) -> Classification:
        """The classification of what was fed (``complete=False``: the body went on)."""
        classifier = self._classifier
        if self._decoder is None:  # a body of ordinary length: one piece
            head = b"".join(self._head)
            text, self._charset = decode(head, self._content_type)
            self._html = is_html(self._content_type, head)
            self._take(text)
            self._cut_segments(0)
        else:
            self._take(self._decoder.decode(b"", final=True))
            self._cut_segments(0)
        truncated = self._cut or not complete
        found = {term: _Counts(count, self._offsets[term]) for term, count in self._counts.items()}
        return classifier._score(found, self._charset, self._chars, truncated)

    def _start(self) -> None:
        head = b"".join(self._head)
        self._head, self._head_size = [], 0
        self._html = is_html(self._content_type, head)
        charset, bom = stream_charset(head[: self._classifier.max_bytes], self._content_type)
        try:
            self._decoder = codecs.getincrementaldecoder(charset)("replace")
        except LookupError:  # pragma: no cover - stream_charset only returns known codecs
            charset, self._decoder = "cp1252", codecs.getincrementaldecoder("cp1252")("replace")
        self._charset = charset
        self._take(self._decoder.decode(head[bom:]))

    def _take(self, text: str) -> None:
        if text:
            self._text.append(text)
            self._text_chars += len(text)
        self._cut_segments(self._classifier.max_chars)

    def _cut_segments(self, keep: int) -> None:
        """Classify segments while more than ``keep`` characters wait."""
        size = self._classifier.max_chars
        while self._text_chars > keep:
            text = "".join(self._text)
            if len(text) <= size:
                cut = len(text)
            else:
                mark = ">" if self._html else " "
                cut = text.rfind(mark, size // 2, size) + 1 or size
            self._text = [text[cut:]] if cut < len(text) else []
            self._text_chars = len(text) - cut
            self._segment(text[:cut], last=not keep and not self._text)

    def _segment(self, text: str, *, last: bool = False) -> None:
        classifier = self._classifier
        if self._html:
            opener = self._opener
            if not last:  # what the next segment starts inside of
                self._opener = _open_raw(opener, text)
            text = html_text(opener + text)
        if len(text) > classifier.max_chars:
            text, self._cut = text[: classifier.max_chars], True
        text = normalise(text)
        if len(text) > classifier.max_chars:
            text, self._cut = text[: classifier.max_chars], True
        text = classifier.join_spaced(text)
        if not text:
            return
        data = text.encode("utf-8", "replace")
        base = self._chars
        if self._tail:
            tail = self._tail
            data = tail + b" " + data
            base -= len(tail.decode("utf-8"))
            self._chars += 1
        self._chars += len(text)
        if classifier._automaton is not None:
            counts: dict[int, int] = {}
            offsets: dict[int, list[int]] = {}
            classifier._count(data, len(self._tail), counts, offsets)
            to_chars = _char_offsets(data, offsets.values(), not data.isascii())
            for term, count in counts.items():
                self._counts[term] = self._counts.get(term, 0) + count
                kept = self._offsets.setdefault(term, [])
                kept += [base + to_chars[at] for at in offsets[term]][: MAX_OFFSETS - len(kept)]
        self._tail = _utf8_tail(data, classifier._reach)


def _utf8_tail(data: bytes, size: int) -> bytes:
    """The last ``size`` bytes or more of UTF-8 ``data``, starting at a character."""
    start = max(0, len(data) - size)
    while start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1
    return data[start:]
