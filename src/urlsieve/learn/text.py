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
* :func:`normalise` — NFKC, casefold, Traditional → Simplified Chinese (OpenCC ``t2s``) and
  runs of white space collapsed to one space
  (leading and trailing white space dropped). Phrase lists go through the same function,
  so a phrase matches the page whatever its width, case or script variant.

Offsets the classifier reports are character offsets in the *normalised* text.
"""

from __future__ import annotations

import codecs
import functools
import operator
import re
import unicodedata
from typing import Any

__all__ = ["decode", "html_text", "is_html", "normalise"]

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


def normalise(text: str) -> str:
    """NFKC + casefold + Traditional → Simplified Chinese + white space collapsed.

    The same as ``" ".join(t2s(casefold(nfkc(text))).split())`` (OpenCC only when there is
    a Han character), about twice as fast: the text is cut into lines once, and a line is
    a narrow string when it is ASCII, so casefold takes its ASCII fast path on the English
    lines and OpenCC sees only the other lines (no OpenCC entry has white space in it, so
    converting lines apart gives what converting the whole text gives)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    for char in _INLINE_SPACES:
        if char in text:
            text = text.replace(char, " ")
    lines = list(filter(None, map(_strip_spaces, map(str.casefold, text.splitlines()))))
    wide = [number for number, line in enumerate(lines) if not line.isascii()]
    if wide:
        joined = "\n".join([lines[number] for number in wide])
        if _HAN.search(joined):
            converted = _to_simplified(joined).split("\n")
            for number, line in zip(wide, converted, strict=True):
                lines[number] = line
    text = " ".join(lines)
    while "  " in text:
        text = text.replace("  ", " ")
    return text
