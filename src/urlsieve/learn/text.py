"""Bytes of a fetched page to the normalised text the classifier scans.

Three small steps, each usable alone:

* :func:`decode` — bytes to ``str``: a byte-order mark, then the charset of the HTTP
  ``Content-Type`` header, then ``<meta charset>`` / ``<meta http-equiv content>`` in the
  first bytes, then strict UTF-8, then charset-normalizer on a sample. Bad bytes become
  U+FFFD; nothing here raises on hostile input.
* :func:`html_text` — the visible text of an HTML document (selectolax/lexbor): script,
  style, noscript and template dropped, entities decoded, block elements separated by a
  line break so words of adjacent blocks do not run together (inline tags join nothing:
  ``<b>网上</b>赌场`` stays one word, as unsegmented scripts need).
* :func:`normalise` — invisible characters removed, NFKC, look-alike letters mapped to
  the Latin letters they imitate (:func:`unconfuse`), casefold, Traditional → Simplified
  Chinese (OpenCC ``t2s``) and runs of white space collapsed to one space (leading and
  trailing white space dropped). Phrase lists go through the same function, so a phrase
  matches the page whatever its width, case, script variant, hidden characters or
  look-alike letters.

Evasions the normalisation undoes (issue 30, item 6): a word split by zero-width or other
invisible characters (``ca\u200bsino``: every format character, Unicode category Cf —
U+200B…U+200F, U+2060…U+2064, U+00AD, U+FEFF… — and the other default-ignorable
characters of :data:`IGNORABLE`), and a word spelled with Cyrillic, Greek or other
look-alikes of Latin letters (``саsinо``). The look-alike table is Unicode's
``confusables.txt`` (UTS #39), as the ``confusable-homoglyphs`` package ships it: every
letter outside the Latin script (and outside the CJK scripts), or a non-ASCII Latin letter
(``ɑ``, ``ı``), that Unicode lists as confusable with exactly one ASCII letter is replaced
by that letter — one character for one, so the text stays as long. UTS #39's full
*skeleton* is not used: it also maps ASCII to ASCII (``m`` → ``rn``, ``0`` → ``O``), which
would change what the existing lists match. A page in Cyrillic or Greek is mapped the same
way as its lists are, so its own phrases still match it. Letter-spaced words (``c a s i n o``)
need the phrase lists and are joined by the classifier.

Offsets the classifier reports are character offsets in the *normalised* text.
"""

from __future__ import annotations

import codecs
import functools
import itertools
import operator
import re
import unicodedata
from typing import Any

__all__ = [
    "IGNORABLE",
    "decode",
    "html_text",
    "is_html",
    "normalise",
    "stream_charset",
    "unconfuse",
]

#: How much of the body is searched for ``<meta charset>`` (the HTML standard says 1024).
META_SNIFF_BYTES = 4096
#: How much of the body charset-normalizer looks at (its cost grows with the sample).
DETECT_SAMPLE_BYTES = 64 * 1024

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Labels browsers decode with a superset (WHATWG Encoding): GBK pages are GB18030, a page
# that says Latin-1 is windows-1252, Big5 is Big5-HKSCS.
_SUPERSETS = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "gb18030": "gb18030",
    "big5": "big5hkscs",
    "big5hkscs": "big5hkscs",
    "cp950": "big5hkscs",
    "latin_1": "cp1252",
    "ascii": "cp1252",
    "iso8859_1": "cp1252",
}
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I)
_META_CHARSET = re.compile(
    rb"""<meta\b[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]{1,40})""", re.I
)
#: Elements a line break is put before, so the words of adjacent blocks do not run together.
BLOCK_TAGS = (
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "br",
    "caption",
    "dd",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "option",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "title",
    "tr",
    "ul",
)
# The letters ``re.IGNORECASE`` also matches beyond the two ASCII cases (Unicode simple case
# folding: the dotted and dotless i, the Kelvin sign, the long s). Spelling the classes out
# keeps the exact behaviour of the first version of the pattern (``re.I``, one alternative
# per tag name), which took 1.7 times as long on the benchmark's pages.
_IGNORECASE_EXTRA = {"i": "\u0130\u0131", "k": "\u212a", "s": "\u017f"}


def _letter(char: str) -> str:
    """A regex matching ``char`` as ``re.IGNORECASE`` would."""
    if not char.isalpha():
        return re.escape(char)
    return f"[{char.upper()}{char}{_IGNORECASE_EXTRA.get(char, '')}]"


def _trie(words: tuple[str, ...]) -> str:
    """An alternation of ``words`` factored by common prefixes (``a(?:ddress|side)``), so a
    failed match costs a few character comparisons rather than one per word."""
    tree: dict[str, Any] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [_letter(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        if "" in node:
            return "(?:" + "|".join(branches) + ")?"
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(tree)


_BLOCK_TAG = re.compile(r"<(?=/?" + _trie(BLOCK_TAGS) + r"[\s/>])")
_DROPPED = ["script", "style", "noscript", "template"]
# CJK ideographs (basic, extension A, compatibility): only text with one needs OpenCC.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# The white space (``str.isspace``, what ``str.split()`` splits on) that is neither the space
# nor a line break of ``str.splitlines()`` and that NFKC leaves alone: tab, unit separator,
# Ogham space mark. (The no-break, en, em, thin, ideographic... spaces become U+0020.)
_INLINE_SPACES = "\t\x1f\u1680"
_strip_spaces = operator.methodcaller("strip", " ")


def _codec(label: str | None) -> str | None:
    """The Python codec for a charset label, or None when it is unknown (or UTF-16/32,
    which a ``<meta>`` or header in an ASCII-compatible stream cannot mean)."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().lower()).name
    except (LookupError, ValueError):
        return None
    name = name.replace("-", "_")
    if name.startswith(("utf_16", "utf_32")):
        return None
    return _SUPERSETS.get(name, name.replace("_", "-"))


def _header_charset(content_type: str | None) -> str | None:
    if not content_type:
        return None
    found = _HEADER_CHARSET.search(content_type)
    return _codec(found.group(1)) if found else None


def _meta_charset(body: bytes) -> str | None:
    found = _META_CHARSET.search(body[:META_SNIFF_BYTES])
    return _codec(found.group(1).decode("ascii", "replace")) if found else None


def _utf8(body: bytes) -> str | None:
    """``body`` as UTF-8 when it is valid (a sequence cut at the very end is allowed:
    the crawler's byte cap may split a character), else None."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        text: str = decoder.decode(body, final=False)
    except UnicodeDecodeError:
        return None
    return text


def _detect(body: bytes) -> str | None:
    from charset_normalizer import from_bytes

    try:
        best = from_bytes(body[:DETECT_SAMPLE_BYTES]).best()
    except Exception:
        return None
    return _codec(best.encoding) if best is not None else None


def decode(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """``body`` as text and the codec used. Order: BOM, header charset, ``<meta>``,
    valid UTF-8, charset-normalizer, windows-1252. Undecodable bytes become U+FFFD."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(name, "replace"), name
    charset = _header_charset(content_type) or _meta_charset(body)
    if charset is None:
        text = _utf8(body)
        if text is not None:
            return text, "utf-8"
        charset = _detect(body) or "cp1252"
    try:
        return body.decode(charset, "replace"), charset
    except LookupError:  # pragma: no cover - _codec only returns known codecs
        return body.decode("cp1252", "replace"), "cp1252"


def stream_charset(head: bytes, content_type: str | None = None) -> tuple[str, int]:
    """The codec :func:`decode` would choose from the first bytes ``head`` of a longer body
    (the same order: BOM, header, ``<meta>``, valid UTF-8 — of ``head`` —, detection,
    windows-1252) and the length of its byte-order mark, which is not text."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    charset = _header_charset(content_type) or _meta_charset(head)
    if charset is None:
        charset = "utf-8" if _utf8(head) is not None else (_detect(head) or "cp1252")
    return charset, 0


def is_html(content_type: str | None, body: bytes = b"") -> bool:
    """Whether a body is HTML: by its media type, else by a ``<`` at its start."""
    if content_type:
        media = content_type.split(";", 1)[0].strip().lower()
        if media in ("text/html", "application/xhtml+xml"):
            return True
        if media.startswith("text/") or media in ("application/json", "application/xml"):
            return False
    return body[:512].lstrip().startswith(b"<")


def html_text(html: str) -> str:
    """The visible text of ``html`` (title included), entities decoded; script, style,
    noscript and template contents dropped; a line break before every block element."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(_BLOCK_TAG.sub("\n<", html))
    tree.strip_tags(_DROPPED)
    root = tree.root
    if root is None:
        return ""
    text: str = root.text(deep=True, separator="", strip=False)
    return text


@functools.cache
def _t2s() -> Any:
    """The OpenCC Traditional → Simplified converter, built once per process."""
    import opencc

    return opencc.OpenCC("t2s")


def _to_simplified(text: str) -> str:
    try:
        converted: str = _t2s().convert(text)
    except UnicodeError:  # lone surrogates: OpenCC takes UTF-8 only
        converted = _t2s().convert(text.encode("utf-8", "replace").decode("utf-8"))
    return converted


#: Default-ignorable characters that are not format characters (Cf, all removed too): the
#: combining grapheme joiner, the Mongolian free variation selectors, the variation
#: selectors and the Hangul fillers. Invisible, so a word can be split by them.
IGNORABLE = (
    "\u034f\u115f\u1160\u180b\u180c\u180d\u180f\u3164\uffa0"
    + "".join(map(chr, range(0xFE00, 0xFE10)))
    + "".join(map(chr, range(0xE0100, 0xE01F0)))
)
# Scripts whose letters are not mapped: their look-alikes are of each other, not of Latin.
_CJK_SCRIPTS = frozenset({"HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "YI"})


@functools.cache
def _lookalikes() -> tuple[dict[int, str | None], re.Pattern[str]]:
    """The translation table of :func:`unconfuse` (invisible characters to nothing, look-
    alike letters to ASCII ones) and a pattern that finds any of its characters. Built once
    per process from ``confusable-homoglyphs``' copy of Unicode's confusables.txt."""
    from confusable_homoglyphs import categories, confusables

    mapped: dict[str, str] = {}
    for char, homoglyphs in confusables.confusables_data.items():
        if len(char) != 1 or char.isascii() or not unicodedata.category(char).startswith("L"):
            continue
        script = categories.alias(char)
        if script in _CJK_SCRIPTS or script in ("COMMON", "INHERITED"):
            continue
        ascii_letters = {
            h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalpha()
        }
        if len(ascii_letters) != 1:
            continue
        (letter,) = ascii_letters
        # confusables.txt's prototype of every upright stroke (I, Ι, І, Ӏ) is "l"; an upper-
        # case stroke imitates "I" in a text that is matched without case.
        if letter == "l" and unicodedata.category(char) == "Lu":
            letter = "I"
        mapped[char] = letter
    # A letter whose case fold is mapped is mapped too (``normalise`` folds after it).
    for char, letter in list(mapped.items()):
        for variant in (char.upper(), char.title()):
            if len(variant) == 1 and variant not in mapped and variant.casefold() == char:
                mapped[variant] = letter
    table: dict[int, str | None] = {ord(char): letter for char, letter in mapped.items()}
    # Format characters live in planes 0, 1 and 14 (the tags); the others hold none.
    for code in itertools.chain(range(0x20000), range(0xE0000, 0xE1000)):
        if unicodedata.category(chr(code)) == "Cf":
            table[code] = None
    for char in IGNORABLE:
        table[ord(char)] = None
    # Characters past U+FFFF are found by one range (a class of single astral characters
    # is tested one by one, thirteen times slower on a Chinese page than the BMP class).
    bmp = "".join(
        re.escape(chr(c)) for c in sorted(table) if c <= 0xFFFF and not 0xD800 <= c < 0xE000
    )
    return table, re.compile(f"[{bmp}\\U00010000-\\U0010FFFF]")


def unconfuse(text: str) -> str:
    """``text`` without invisible characters, NFKC-normalised, with look-alike letters
    replaced by the ASCII letters they imitate (see the module docstring); idempotent.
    Linear in ``text``; an ASCII text is returned as it is."""
    if text.isascii():
        return text
    table, wanted = _lookalikes()
    if wanted.search(text):
        text = text.translate(table)
    text = unicodedata.normalize("NFKC", text)
    # NFKC can make a format character or a look-alike (rarely): once more, then stable.
    if wanted.search(text):
        text = unicodedata.normalize("NFKC", text.translate(table))
    return text


def normalise(text: str) -> str:
    """:func:`unconfuse` + casefold + Traditional → Simplified Chinese + white space
    collapsed.

    The same as ``" ".join(t2s(fold(casefold(unconfuse(text)))).split())`` (``fold``:
    ``casefold(nfkc(translate(…)))`` when casefold made a look-alike, as U+0345 folds to a
    Greek iota; OpenCC only when there is a Han character), about twice as fast: the text
    is cut into lines once, and a line is a narrow string when it is ASCII, so casefold
    takes its ASCII fast path on the English lines and OpenCC sees only the other lines (no
    OpenCC entry has white space in it, so converting lines apart gives what converting the
    whole text gives)."""
    text = unconfuse(text)
    for char in _INLINE_SPACES:
        if char in text:
            text = text.replace(char, " ")
    lines = list(filter(None, map(_strip_spaces, map(str.casefold, text.splitlines()))))
    wide = [number for number, line in enumerate(lines) if not line.isascii()]
    if wide:
        joined = "\n".join([lines[number] for number in wide])
        table, wanted = _lookalikes()
        changed = False
        if wanted.search(joined):  # what casefold made: U+0345 folds to a Greek iota
            joined = unicodedata.normalize("NFKC", joined.translate(table)).casefold()
            changed = True
        if _HAN.search(joined):
            joined = _to_simplified(joined)
            changed = True
        if changed:
            for number, line in zip(wide, joined.split("\n"), strict=True):
                lines[number] = line.strip(" ")
    text = " ".join(filter(None, lines))
    while "  " in text:
        text = text.replace("  ", " ")
    return text
