"""Phrase lists in E2Guardian's format, and the seed's plain sensitive-word lexicon.

E2Guardian's format (``ListContainer::readPhraseList`` in its source), one entry a line:

* ``<online casino><40>`` — a weighted phrase; weights may be negative (``<breast
  cancer><-30>``: the medical sense lowers a page's score);
* ``< casino >`` — white space inside the brackets is a word boundary on that side: the
  phrase only counts where it is not part of a longer word; without it a phrase matches
  anywhere (how unsegmented scripts such as Chinese are matched);
* ``<casino>,<bonus><20>`` — a combination: it counts when every term is on the page;
* banned lists (``<phrase>``: the page is blocked whatever its score) and exception
  lists (``<phrase>``: the page is never blocked); a combination works in both;
* ``#listcategory: "Gambling"`` — the category of the lines that follow (included files
  inherit it); other ``#`` lines are comments, also after an entry;
* ``.Include<path>`` — another list, relative to the including file or absolute.

Where E2Guardian silently guesses, this reader reports a :class:`RuleSyntaxError`
(``file:line: reason``) and skips the line, the good lines still load: a weighted-list
line without a weight (E2Guardian would make it a *banned* phrase), a weight of 0 (the
same), a weight that is not an integer (``<25i>``: E2Guardian reads 0), percentage
weights, a ``<`` inside a phrase, a missing ``>``, text after the entry, lines that are
not UTF-8, include cycles and includes deeper than :data:`MAX_INCLUDE_DEPTH`.

The plain lexicon (one word per line, ``#`` comments) has no weights or categories: the
caller gives both per file. Its words match without word boundaries. **A one-character
lexicon word is reported and skipped**: a single character such as 赌 (gamble) occurs in
innocent words (赌气, to sulk), and hard negatives — news, medical and education pages —
must not be blocked by single-character hits. A one-character phrase that is really
wanted goes in a weighted list, with an explicit weight.

Phrases are normalised with :func:`urlsieve.learn.text.normalise`, the function that
normalises page text, so width, case and Traditional/Simplified variants match.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from urlsieve.exceptions import RuleSyntaxError
from urlsieve.learn.text import normalise

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_INCLUDE_DEPTH",
    "MAX_LINE_CHARS",
    "MAX_PHRASE_CHARS",
    "MAX_PHRASES",
    "Kind",
    "Phrase",
    "PhraseSet",
    "Term",
]

Kind = Literal["weighted", "banned", "exception"]

#: Lists larger than this are not read (an error names the file).
MAX_FILE_BYTES = 64 * 1024 * 1024
#: Longer lines are reported and skipped.
MAX_LINE_CHARS = 4096
#: Longer phrases (terms) are reported and skipped (E2Guardian truncates at 127 bytes).
MAX_PHRASE_CHARS = 256
#: Phrases one :class:`PhraseSet` holds at most; the rest are reported and dropped.
MAX_PHRASES = 1_000_000
#: ``.Include<>`` nesting deeper than this is reported and not followed.
MAX_INCLUDE_DEPTH = 16

#: The category of weighted and banned phrases of a list without ``#listcategory``.
UNCATEGORISED = "uncategorised"


@dataclass(frozen=True, slots=True)
class Term:
    """One bracketed term: normalised text and whether each side needs a word boundary."""

    text: str
    left: bool = False
    right: bool = False

    def __str__(self) -> str:
        return f"<{' ' if self.left else ''}{self.text}{' ' if self.right else ''}>"


@dataclass(frozen=True, slots=True)
class Phrase:
    """A list entry: one term, or several for a combination (all must be present).
    ``weight`` is 0 for banned and exception phrases."""

    terms: tuple[Term, ...]
    kind: Kind
    weight: int
    category: str | None
    source: str
    line: int

    def __str__(self) -> str:
        return ",".join(str(term) for term in self.terms)


@dataclass(frozen=True, slots=True)
class PhraseSet:
    """Every phrase of a set of lists, in load order, and the errors met reading them."""

    phrases: tuple[Phrase, ...] = ()
    errors: tuple[RuleSyntaxError, ...] = ()

    @classmethod
    def load(
        cls,
        *,
        weighted: Iterable[str | os.PathLike[str]] = (),
        banned: Iterable[str | os.PathLike[str]] = (),
        exception: Iterable[str | os.PathLike[str]] = (),
        lexicons: Iterable[tuple[str | os.PathLike[str], str, int]] = (),
        max_phrases: int = MAX_PHRASES,
    ) -> PhraseSet:
        """Read E2Guardian weighted, banned and exception lists and plain lexicons given
        as ``(path, category, weight)``. Never raises for bad content: every problem is
        in ``errors`` and the good lines are in ``phrases``."""
        reader = _Reader(max_phrases)
        for kind, paths in (("weighted", weighted), ("banned", banned), ("exception", exception)):
            for path in paths:
                reader.read_list(os.fspath(path), kind, None, (), None)  # type: ignore[arg-type]
        for path, category, weight in lexicons:
            reader.read_lexicon(os.fspath(path), category, weight)
        return cls(tuple(reader.phrases), tuple(reader.errors))

    def renamed(self, rename: Callable[[str], str]) -> PhraseSet:
        """The same phrases with each category renamed (the base lists' spelling of it:
        ``Gambling`` → ``gambling``)."""
        phrases = tuple(
            p if p.category is None else dataclasses.replace(p, category=rename(p.category))
            for p in self.phrases
        )
        return PhraseSet(phrases, self.errors)

    @property
    def categories(self) -> set[str]:
        """Every category of the phrases."""
        return {p.category for p in self.phrases if p.category is not None}


@dataclass
class _Reader:
    max_phrases: int
    phrases: list[Phrase] = field(default_factory=list)
    errors: list[RuleSyntaxError] = field(default_factory=list)
    full: bool = False

    def error(self, reason: str, source: str, line: int | None = None) -> None:
        self.errors.append(RuleSyntaxError(reason, source, line))

    def add(self, phrase: Phrase) -> None:
        if len(self.phrases) >= self.max_phrases:
            if not self.full:
                self.error(
                    f"more than {self.max_phrases} phrases: the rest dropped",
                    phrase.source,
                    phrase.line,
                )
                self.full = True
            return
        self.phrases.append(phrase)

    def lines(self, path: str, where: tuple[str, int] | None) -> Iterator[tuple[int, str]]:
        """Numbered UTF-8 lines of ``path``; unreadable files and bad lines reported."""
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            reason = f"cannot read {path}: {exc.strerror or exc}"
            if where is None:
                self.error(reason, path)
            else:
                self.error(reason, *where)
            return
        if len(data) > MAX_FILE_BYTES:
            self.error(f"larger than {MAX_FILE_BYTES} bytes: not read", path)
            return
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        for number, raw in enumerate(data.split(b"\n"), 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.error(
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                    path,
                    number,
                )
                continue
            if len(text) > MAX_LINE_CHARS:
                self.error(f"line longer than {MAX_LINE_CHARS} characters", path, number)
                continue
            yield number, text.strip()

    def read_list(
        self,
        path: str,
        kind: Kind,
        category: str | None,
        stack: tuple[str, ...],
        where: tuple[str, int] | None,
    ) -> None:
        real = os.path.realpath(path)
        stack = (*stack, real)
        for number, line in self.lines(path, where):
            if not line:
                continue
            lower = line.lower()
            if lower.startswith("#listcategory:"):
                value = line.split(":", 1)[1].strip()
                name = value.strip('"').strip()
                if not name or value.count('"') not in (0, 2):
                    self.error('expected #listcategory: "Name"', path, number)
                    continue
                category = name
            elif line.startswith("#"):
                continue
            elif lower.startswith(".include<"):
                self.include(path, number, line, kind=kind, category=category, stack=stack)
            elif line.startswith("<"):
                try:
                    phrase = _parse_entry(line, kind, category, path, number)
                except RuleSyntaxError as exc:
                    self.errors.append(exc)
                    continue
                self.add(phrase)
            else:
                self.error(
                    "not a phrase line (expected <phrase>, .Include<path> or # comment)",
                    path,
                    number,
                )

    def include(
        self,
        path: str,
        number: int,
        line: str,
        *,
        kind: Kind,
        category: str | None,
        stack: tuple[str, ...],
    ) -> None:
        rest = line[len(".include<") :]
        end = rest.find(">")
        target = rest[:end].strip() if end >= 0 else ""
        if end < 0 or not target or rest[end + 1 :].strip():
            self.error("expected .Include<path>", path, number)
            return
        target = os.path.join(os.path.dirname(path), target)
        real = os.path.realpath(target)
        if real in stack:
            chain = " -> ".join((*stack, real))
            self.error(f"include cycle: {chain}", path, number)
            return
        if len(stack) > MAX_INCLUDE_DEPTH:
            self.error(f"includes nested deeper than {MAX_INCLUDE_DEPTH}", path, number)
            return
        self.read_list(target, kind, category, stack, (path, number))

    def read_lexicon(self, path: str, category: str, weight: int) -> None:
        for number, line in self.lines(path, None):
            if not line or line.startswith("#"):
                continue
            word = normalise(line).strip()
            if len(word) > MAX_PHRASE_CHARS:
                self.error(f"word longer than {MAX_PHRASE_CHARS} characters", path, number)
                continue
            if len(word) < 2:
                self.error(
                    f"one-character word {word!r} skipped: single-character hits would block "
                    "innocent pages; give it an explicit weight in a weighted list if needed",
                    path,
                    number,
                )
                continue
            self.add(Phrase((Term(word),), "weighted", weight, category, path, number))


def _groups(line: str, source: str, number: int) -> tuple[list[str], str | None]:
    """Split ``<a>,<b><w> # comment`` into its terms and its weight text (or None)."""
    terms: list[str] = []
    weight: str | None = None
    pos = 0
    size = len(line)
    expect_term = True
    while True:
        if pos >= size or line[pos] != "<":
            raise RuleSyntaxError("expected <", source, number)
        end = line.find(">", pos + 1)
        if end < 0:
            raise RuleSyntaxError("missing > at the end of a phrase", source, number)
        content = line[pos + 1 : end]
        if "<" in content:
            raise RuleSyntaxError(f"'<' inside a phrase: <{content}", source, number)
        if expect_term:
            terms.append(content)
        else:
            weight = content
        pos = end + 1
        while pos < size and line[pos] in " \t":
            pos += 1
        if pos >= size or line[pos] == "#":
            return terms, weight
        if weight is not None:
            raise RuleSyntaxError("text after the weight", source, number)
        if line[pos] == ",":
            pos += 1
            while pos < size and line[pos] in " \t":
                pos += 1
            expect_term = True
        elif line[pos] == "<":
            expect_term = False
        else:
            raise RuleSyntaxError(
                f"unexpected text after >: {line[pos : pos + 20]!r}", source, number
            )


def _parse_weight(text: str, source: str, number: int) -> int:
    value = text.strip()
    if value.endswith("%"):
        raise RuleSyntaxError(f"percentage weight <{text}> is not supported", source, number)
    digits = value[1:] if value[:1] in "+-" else value
    if not digits.isascii() or not digits.isdigit() or len(digits) > 9:
        raise RuleSyntaxError(f"weight <{text}> is not an integer", source, number)
    return int(value)


def _term(content: str, source: str, number: int) -> Term:
    text = normalise(content).strip()
    if not text:
        raise RuleSyntaxError("empty phrase", source, number)
    if len(text) > MAX_PHRASE_CHARS:
        raise RuleSyntaxError(f"phrase longer than {MAX_PHRASE_CHARS} characters", source, number)
    return Term(text, content[:1].isspace(), content[-1:].isspace())


def _parse_entry(line: str, kind: Kind, category: str | None, source: str, number: int) -> Phrase:
    contents, weight_text = _groups(line, source, number)
    terms = tuple(_term(content, source, number) for content in contents)
    if kind == "weighted":
        if weight_text is None:
            raise RuleSyntaxError(
                "no <weight> (E2Guardian would make this a banned phrase: move it to a banned "
                "list or add a weight)",
                source,
                number,
            )
        weight = _parse_weight(weight_text, source, number)
        if weight == 0:
            raise RuleSyntaxError("weight 0 (E2Guardian reads it as banned)", source, number)
        return Phrase(terms, kind, weight, category or UNCATEGORISED, source, number)
    if weight_text is not None:
        raise RuleSyntaxError(
            f"a weight in a {kind} list: move the line to a weighted list", source, number
        )
    default = UNCATEGORISED if kind == "banned" else None
    return Phrase(terms, kind, 0, category or default, source, number)
