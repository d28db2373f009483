"""Load list files and squidGuard/UT1 category trees into rules, with a report per file.

A path is read by what it is:

- a directory with ``domains``/``urls`` files is one squidGuard category
  (named after the directory); any other directory is a tree of categories,
  one per subdirectory, with symlinked aliases (real symlinks, or the small
  text files git writes for symlinks on checkouts without them) recorded
  and not loaded twice;
- a file is read in ``format`` (``auto`` sniffs it: ``.csv`` → csv, Adblock
  headers or ``||`` rules → adblock, ``ADDRESS host`` lines → hosts, else
  plain); its category is the file stem.

In a category directory: ``domains`` are host rules; ``urls`` are
host/path rules whose leading ``www``/``web``/``ftp`` label (with digits,
``www2.``) is dropped as squidGuard does, unless that would leave a public
suffix; ``expressions`` files hold regular expressions, which urlsieve does not
apply: each of their lines is reported and skipped.

The action comes from where a list is named, never from the list itself: every
rule of a block list blocks (``@@`` lines excepted), every rule of an allow list
allows. A category's ``usage`` file only tells which categories of a *tree* are
meant as allow lists (``white`` without ``black``; UT1 writes ``black white`` for
lists usable either way): such a category is not loaded from a tree given as a
block list unless it is selected by name, and is reported as skipped. A category
directory named on its own is loaded as what it was named as.

``categories`` selects the categories of trees (block and allow trees alike; an
alias selects the category it points to); a category directory or a list file
named on its own is always loaded.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from urlsieve.exceptions import RuleSyntaxError
from urlsieve.rules.model import ALLOW, BLOCK, Rule, parse_rule
from urlsieve.rules.readers import (
    FORMATS,
    TEXT_MODES,
    LineContext,
    ListReport,
    RuleList,
    RuleSink,
    plain_line,
    read_text,
    sniff_format,
    strip_comment,
)

__all__ = [
    "MAX_LIST_BYTES",
    "LoadResult",
    "list_files",
    "load_category_files",
    "load_lists",
    "read_list_text",
]

#: The largest list file read (after gunzipping): 1 GiB.
MAX_LIST_BYTES = 1 << 30

_WWW = re.compile(r"(?:www|web|ftp)[0-9]*\.", re.IGNORECASE)
_DOMAIN_FILES = ("domains",)
_URL_FILES = ("urls",)
_EXPRESSION_FILES = re.compile(r".*expressions?$")

Progress = Callable[[int], None]


@dataclass
class LoadResult:
    """The rules read (duplicates dropped) and a report for every file."""

    rules: list[Rule] = field(default_factory=list)
    reports: list[ListReport] = field(default_factory=list)
    #: squidGuard alias name → the category it points to.
    aliases: dict[str, str] = field(default_factory=dict)
    #: Every category found in the trees, loaded or not (name → directory).
    categories: dict[str, str] = field(default_factory=dict)
    #: Categories of trees not loaded, with the reason (a white-usage one in a block tree).
    skipped: list[str] = field(default_factory=list)

    @property
    def warnings(self) -> list[RuleSyntaxError]:
        """Every bad line of every file, in reading order."""
        return [w for r in self.reports for w in r.warnings]

    @property
    def notes(self) -> list[str]:
        """Every line read in a way worth knowing (``file:line: text``), in reading order."""
        return [n for r in self.reports for n in r.notes]

    def merge(self, other: LoadResult) -> None:
        """Add another load's reports, aliases, skipped categories and categories (the
        first directory named for a category stays). Rules stream to a sink: not merged."""
        self.reports += other.reports
        self.aliases.update(other.aliases)
        self.skipped += other.skipped
        for name, where in other.categories.items():
            self.categories.setdefault(name, where)


_SG_BLANKS = re.compile(r"[ \t]+")


def _squidguard_entry(text: str, number: int, ctx: LineContext, kind: str) -> str:
    """A domainlist/urllist line as squidGuard 1.6 reads it (``sgDbLoadTextFile`` in its
    ``sgDb.c``): a line starting ``#`` is a comment; one leading ``+`` or ``-`` is dropped;
    the first word (blanks and tabs separate) is the entry, lower-cased; the rest of the
    line is the entry's own redirect page, which urlsieve does not apply (said in
    ``ctx.notes``; a rest starting ``#`` is read as the comment it was meant to be)."""
    if text.startswith("#"):
        return ""
    if text[:1] in ("+", "-"):
        text = text[1:]
    parts = _SG_BLANKS.split(text.strip(" \t\r"), 1)
    entry = parts[0]
    if entry.startswith("#"):
        return ""
    where = f"{ctx.source}:{number}"
    if len(parts) > 1 and not parts[1].startswith("#"):
        ctx.notes.append(
            f"{where}: {parts[1]!r} after {entry!r} is a redirect page of that entry for "
            "squidGuard: not applied (deviation: the destination's or ACL's page is used)"
        )
    if kind == "domains" and (
        entry.startswith((".", "*")) or "/" in entry or ":" in entry or "@" in entry
    ):
        ctx.notes.append(
            f"{where}: {entry!r} matches nothing in squidGuard (a domainlist entry is a "
            "bare host name); urlsieve reads it as the host it names (deviation)"
        )
    return entry


def _domains_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    text = _squidguard_entry(text, number, ctx, "domains")
    if not text:
        return []
    rules = plain_line(text, number, ctx)
    for rule in rules:
        if rule.path != "/" or rule.query is not None:
            raise RuleSyntaxError(
                f"a path in a domains file (paths belong in 'urls'): {rule.pattern!r}",
                ctx.source,
                number,
            )
    return rules


def _urls_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    text = _squidguard_entry(text, number, ctx, "urls")
    if not text:
        return []
    match = _WWW.match(text)
    if match is not None:
        try:
            rule = parse_rule(text[match.end() :], ctx.action, ctx.category, ctx.source, number)
        except RuleSyntaxError:
            pass  # "web.de/x": dropping the label would leave a public suffix
        else:
            return [rule._replace(pattern=text)]
    return [parse_rule(text, ctx.action, ctx.category, ctx.source, number)]


def _expression_line(text: str, number: int, ctx: LineContext) -> list[Rule]:
    if not strip_comment(text):
        return []
    raise RuleSyntaxError(
        "regular-expression lists are not applied by urlsieve (use domains/urls)",
        ctx.source,
        number,
    )


TEXT_MODES[_domains_line] = 1
TEXT_MODES[_urls_line] = 2


def _white_usage(directory: Path) -> bool:
    """Whether a category's ``usage`` says it is meant as an allow list."""
    usage = directory / "usage"
    if usage.is_file():
        with usage.open("rb") as fh:
            words = fh.read(4096).decode("utf-8", "replace").lower().split()
        # UT1 writes "black white" for lists usable either way: only "white" alone allows.
        return "white" in words and "black" not in words
    return False


def _global_usage(root: Path) -> dict[str, str]:
    """UT1's catalogue (``global_usage`` at the tree's root): each category's
    ``DEFAULT_TYPE`` (``black``: meant to block; ``white``: meant to allow), by ``NAME``."""
    path = root / "global_usage"
    if not path.is_file():
        return {}
    with path.open("rb") as fh:
        text = fh.read(1 << 20).decode("utf-8", "replace")
    types: dict[str, str] = {}
    name: str | None = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().upper()
        if key == "NAME":
            name = value.strip() or None
        elif key == "DEFAULT_TYPE" and name is not None:
            types[name] = value.strip().lower()
    return types


def _allow_type(directory: Path, catalogue: dict[str, str]) -> str | None:
    """Why a category of a tree is meant as an allow list, or None: UT1's catalogue
    first, then the category's own ``usage`` file."""
    kind = catalogue.get(directory.name)
    if kind is not None:
        if kind != "white":
            return None
        return "allow-type category skipped (DEFAULT_TYPE white in the tree's global_usage)"
    return "white-usage category skipped (an allow list)" if _white_usage(directory) else None


def _is_category_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in (*_DOMAIN_FILES, *_URL_FILES))


def read_list_text(path: Path) -> str:
    """A list file's text: gzip-compressed files are read as what they hold, bytes that are
    not UTF-8 are kept (as ``surrogateescape``, which the canonicaliser maps back to the
    byte), and a file that is not text is refused with the reason."""
    with path.open("rb") as fh:
        data = fh.read(MAX_LIST_BYTES + 1)
        if data[:2] == b"\x1f\x8b":
            data = _gunzip(path, data)
    if len(data) > MAX_LIST_BYTES:
        raise RuleSyntaxError(f"larger than {MAX_LIST_BYTES} bytes: split the list", str(path))
    if data[257:262] == b"ustar":
        raise RuleSyntaxError(
            "a tar archive, not a list: extract it and give the directory", str(path)
        )
    nul = data.find(b"\x00", 0, 1 << 16)
    if nul >= 0 or data.startswith((b"\x7fELF", b"PK\x03\x04", b"%PDF")):
        at = f" (a NUL byte at offset {nul})" if nul >= 0 else ""
        raise RuleSyntaxError(f"binary data, not a text list{at}", str(path))
    return data.decode("utf-8", "surrogateescape")


def _gunzip(path: Path, data: bytes) -> bytes:
    """``data`` gunzipped, stopping at :data:`MAX_LIST_BYTES` (a gzip bomb is refused)."""
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
            while chunk := gz.read(1 << 20):
                out += chunk
                if len(out) > MAX_LIST_BYTES:
                    raise RuleSyntaxError(
                        f"decompresses to more than {MAX_LIST_BYTES} bytes", str(path)
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise RuleSyntaxError(f"damaged gzip data ({exc})", str(path)) from exc
    return bytes(out)


def _alias_target(entry: Path) -> str | None:
    """The category a symlink (or git's symlink-as-text-file) in a tree points to."""
    if entry.is_symlink():
        try:
            target = entry.resolve(strict=True)
        except (OSError, RuntimeError) as exc:  # a dangling link, or a loop
            raise RuleSyntaxError(f"unusable symlink ({exc})", str(entry)) from exc
        return target.name if target.is_dir() else None
    if entry.is_file() and entry.stat().st_size < 256:
        try:
            text = entry.read_text("utf-8").strip()
        except UnicodeDecodeError:
            return None
        if text and "/" not in text and "\n" not in text and (entry.parent / text).is_dir():
            return text
    return None


def _tree_categories(root: Path, aliases: dict[str, str], problems: list[str]) -> list[Path]:
    if _is_category_dir(root):
        return [root]
    out = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        try:
            target = _alias_target(entry)
        except RuleSyntaxError as exc:  # reported; the rest of the tree still loads
            problems.append(f"{exc}: skipped")
            continue
        if target is not None:
            aliases[entry.name] = target
        elif entry.is_dir() and _is_category_dir(entry):
            out.append(entry)
    return out


class _Loader:
    def __init__(
        self,
        *,
        action: str | None,
        format: str,
        category: str | None,
        categories: Collection[str] | None,
        strict: bool,
        progress: Progress | None,
        sink: RuleSink | None,
    ) -> None:
        if format != "auto" and format not in FORMATS:
            raise ValueError(
                f"unknown list format {format!r}; use auto or one of {sorted(FORMATS)}"
            )
        self.action = action
        self.format = format
        self.category = category
        self.categories = None if categories is None else frozenset(categories)
        self.strict = strict
        self.progress = progress
        self.result = LoadResult()
        if sink is None:
            collected = RuleList()
            self.result.rules = collected.rules
            sink = collected
        self.sink = sink

    def _read(
        self,
        path: Path,
        fmt: str,
        parse: Callable[[str, int, LineContext], list[Rule]],
        category: str,
        action: str,
        *,
        text: str | None = None,
    ) -> None:
        # One read: runs of plain lines go to a bulk sink straight from the text, other
        # lines are cut from it one at a time.
        if text is None:
            text = read_list_text(path)
        report = ListReport(str(path), fmt, category, action)
        self.result.reports.append(report)
        read_text(text, parse, report, self.sink, strict=self.strict, progress=self.progress)

    def file(self, path: Path) -> None:
        text = read_list_text(path)
        fmt = self.format
        if fmt == "auto":
            fmt = sniff_format(path.name.removesuffix(".gz"), text[: 1 << 20].split("\n", 200))
        category = self.category or Path(path.name.removesuffix(".gz")).stem
        self._read(path, fmt, FORMATS[fmt](), category, self.action or BLOCK, text=text)

    def tree(self, root: Path) -> None:
        result = self.result
        if _is_category_dir(root):  # named on its own: loaded as what it was named as
            result.categories.setdefault(root.name, str(root))
            self.category_dir(root, self.action or BLOCK)
            return
        aliases: dict[str, str] = {}
        directories = _tree_categories(root, aliases, result.skipped)
        result.aliases.update(aliases)
        selected = (
            None
            if self.categories is None
            else {aliases.get(name, name) for name in self.categories}
        )
        catalogue = _global_usage(root) if selected is None and not self.action else {}
        for directory in directories:
            name = directory.name
            result.categories.setdefault(name, str(directory))
            if selected is not None and name not in selected:
                continue
            why = (
                _allow_type(directory, catalogue) if selected is None and not self.action else None
            )
            if why is not None:
                result.skipped.append(
                    f"{directory}: {why}: name it in --allow to allow it, or in --categories "
                    "to block it"
                )
                continue
            self.category_dir(directory, self.action or BLOCK)

    def category_dir(self, directory: Path, action: str) -> None:
        category = self.category or directory.name
        for entry in sorted(directory.iterdir()):
            if not entry.is_file():
                continue
            if entry.name in _DOMAIN_FILES:
                kind, parse = "squidguard-domains", _domains_line
            elif entry.name in _URL_FILES:
                kind, parse = "squidguard-urls", _urls_line
            elif _EXPRESSION_FILES.fullmatch(entry.name):
                kind, parse = "squidguard-expressions", _expression_line
            else:
                continue
            try:
                self._read(entry, kind, parse, category, action)
            except RuleSyntaxError as exc:  # a file of the tree that is no list: the rest loads
                if self.strict:
                    raise
                self.result.skipped.append(f"{exc}: skipped")


def load_lists(
    paths: Sequence[str | os.PathLike[str]],
    *,
    action: str | None = None,
    format: str = "auto",
    category: str | None = None,
    categories: Collection[str] | None = None,
    strict: bool = False,
    progress: Progress | None = None,
    sink: RuleSink | None = None,
) -> LoadResult:
    """Read list files and squidGuard trees (see the module docstring) into one rule set.

    ``action`` forces ``block`` or ``allow`` for every rule (``@@`` lines
    stay allow rules); ``None`` means block, and white-usage categories of trees
    are skipped unless selected. ``categories`` selects the categories of trees
    (aliases resolved). A rule whose key and action were already read
    (from any file) is counted as a duplicate and dropped. ``strict`` raises
    :class:`RuleSyntaxError` at the first bad line; otherwise bad lines are
    in each report's ``warnings``. ``progress`` receives characters read.

    Rules go to ``sink`` (e.g. :meth:`urlsieve.match.HashMatcher.add`, so that
    no list of every rule is ever built) or, by default, into ``result.rules``.
    """
    if action not in (None, BLOCK, ALLOW):
        raise ValueError(f"action must be 'block', 'allow' or None, not {action!r}")
    loader = _Loader(
        action=action,
        format=format,
        category=category,
        categories=categories,
        strict=strict,
        progress=progress,
        sink=sink,
    )
    for raw in paths:
        path = Path(raw)
        try:
            if path.is_dir():
                loader.tree(path)
            elif path.is_file():
                loader.file(path)
            else:
                raise RuleSyntaxError("no such list file or directory", str(path))
        except OSError as exc:  # unreadable file or directory (e.g. Squid's 'proxy' user)
            where = str(exc.filename) if exc.filename else str(path)
            raise RuleSyntaxError(f"cannot read ({exc.strerror or exc})", where) from exc
    return loader.result


def load_category_files(
    category: str,
    *,
    domains: str | os.PathLike[str] | None = None,
    urls: str | os.PathLike[str] | None = None,
    action: str = BLOCK,
    strict: bool = False,
    sink: RuleSink | None = None,
) -> LoadResult:
    """A squidGuard destination's ``domainlist`` and ``urllist`` files, wherever they are
    and whatever their names, read as one category (``category``)."""
    loader = _Loader(
        action=action,
        format="auto",
        category=category,
        categories=None,
        strict=strict,
        progress=None,
        sink=sink,
    )
    for path, kind, parse in (
        (domains, "squidguard-domains", _domains_line),
        (urls, "squidguard-urls", _urls_line),
    ):
        if path is None:
            continue
        try:
            loader._read(Path(path), kind, parse, category, action)
        except OSError as exc:
            raise RuleSyntaxError(f"cannot read ({exc.strerror or exc})", str(path)) from exc
    return loader.result


def list_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every file :func:`load_lists` would read (for sizing a progress bar)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for directory in _tree_categories(path, {}, []):
                out += [
                    e
                    for e in sorted(directory.iterdir())
                    if e.is_file()
                    and (
                        e.name in (*_DOMAIN_FILES, *_URL_FILES)
                        or _EXPRESSION_FILES.fullmatch(e.name)
                    )
                ]
        elif path.is_file():
            out.append(path)
    return out
