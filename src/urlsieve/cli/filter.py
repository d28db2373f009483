"""``urlsieve filter``: stream URLs from stdin to stdout with their verdicts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from urlsieve._accel import speedups
from urlsieve._lines import TooLong, fill_holes
from urlsieve.cli._io import is_blank, line_text, stdin_raw_batches, too_long
from urlsieve.cli._lists import add_list_arguments, load_filter, verdict_record
from urlsieve.exceptions import InvalidURL
from urlsieve.filter import Filter
from urlsieve.match import Verdict
from urlsieve.rules import Rule
from urlsieve.url import URL, parse_url

# A read's text output in one compiled call (reference: the per-line path, _Lines).
_filter_reply = getattr(speedups, "filter_reply", None)
_ONLY_BITS = {"block": 1, "allow": 2, "none": 4}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "filter",
        help="stream URLs from stdin to stdout with their verdicts",
        description=(
            "Read one URL per line on standard input and write one line per URL: "
            "'action<TAB>category-or-dash<TAB>rule-source-or-dash<TAB>input-url' "
            "(or JSON lines), so the output lines up with the input. A line that is not "
            "a URL gets the action 'invalid' and is reported on stderr as 'line N: reason'; "
            "the stream goes on and the exit status is then 1. A blank line is not an "
            "error: it gets a blank output line (jsonl: action 'blank'). Exit status 2: "
            "the lists could not be loaded."
        ),
    )
    add_list_arguments(p)
    p.add_argument("--format", choices=("text", "jsonl"), default="text")
    p.add_argument(
        "--only",
        choices=("block", "allow", "none", "invalid"),
        action="append",
        help="write only these verdicts (repeatable)",
    )
    p.set_defaults(run=run)


def _output() -> BinaryIO | None:
    return getattr(sys.stdout, "buffer", None)


def _verdict_line(
    text: str, match: Callable[[URL], Rule | None], jsonl: bool, only: frozenset[str] | None
) -> tuple[str | None, str | None]:
    """``(output line or None when --only leaves it out, reason when not a URL)``."""
    try:
        url = parse_url(text)
        rule: Rule | None = match(url)
    except InvalidURL as exc:
        reason = exc.reason
    except Exception as exc:  # one line never stops the stream: it is invalid, with why
        reason = f"internal error: {type(exc).__name__}: {exc}"
    else:
        action = rule.action if rule is not None else "none"
        if only is not None and action not in only:
            return None, None
        if jsonl:
            return json.dumps(verdict_record(text, Verdict.of(rule, url.canonical))) + "\n", None
        if rule is None:
            return f"none\t-\t-\t{text}\n", None
        return f"{rule.action}\t{rule.category}\t{rule.where}\t{text}\n", None
    return _invalid_line(text, reason, jsonl, only), reason


def _decide_batch(flt: Filter, batch: list[tuple[int, str | None]]) -> list[object]:
    """The deciding rule (or ``None``, or the error) of each URL of a batch, in one call."""
    texts = [text for _, text in batch if text is not None and not is_blank(text)]
    try:
        return list(flt.match_many(texts))
    except Exception as exc:  # never expected: each line says so instead of the stream dying
        return [RuntimeError(f"internal error: {type(exc).__name__}: {exc}")] * len(texts)


def _text_line(
    text: str, decided: object, only: frozenset[str] | None
) -> tuple[str | None, str | None]:
    """The text output line for a URL the batch decided (see :func:`_verdict_line`)."""
    if isinstance(decided, InvalidURL):
        return _invalid_line(text, decided.reason, False, only), decided.reason
    if isinstance(decided, Exception):
        return _invalid_line(text, str(decided), False, only), str(decided)
    rule = decided if isinstance(decided, Rule) else None
    action = rule.action if rule is not None else "none"
    if only is not None and action not in only:
        return None, None
    if rule is None:
        return f"none\t-\t-\t{text}\n", None
    return f"{rule.action}\t{rule.category}\t{rule.where}\t{text}\n", None


def _invalid_line(text: str, reason: str, jsonl: bool, only: frozenset[str] | None) -> str | None:
    """The output line of an input line that is not a URL (None when --only leaves it out)."""
    if only is not None and "invalid" not in only:
        return None
    if jsonl:
        return json.dumps({"url": text, "action": "invalid", "error": reason}) + "\n"
    return f"invalid\t-\t-\t{text}\n"


class _Lines:
    """The per-line path: each line's output text, and the count of rejected lines."""

    def __init__(self, flt: Filter, only: frozenset[str] | None, jsonl: bool) -> None:
        self.flt = flt
        self.only = only
        self.jsonl = jsonl
        self.rejected = 0

    def __call__(self, batch: list[tuple[int, str | None]]) -> list[str]:
        """One output text per line, ``""`` for a line that writes nothing."""
        only, jsonl = self.only, self.jsonl
        blank = '{"url": "", "action": "blank"}\n' if jsonl else "\n"
        out: list[str] = []
        decided = iter(() if jsonl else _decide_batch(self.flt, batch))
        for number, text in batch:
            reason: str | None
            if text is None:  # skipped unread: nothing to echo
                reason = too_long()
                line = _invalid_line("", reason, jsonl, only)
            elif is_blank(text):
                # not a URL, not an error: kept for the alignment
                out.append(blank if only is None else "")
                continue
            elif jsonl:  # the canonical form is written: each URL parsed
                line, reason = _verdict_line(text, self.flt.match, jsonl, only)
            else:
                line, reason = _text_line(text, next(decided), only)
            out.append(line or "")
            if reason is not None:
                self.rejected += 1
                shown = "" if text is None else f": {text[:200]!r}"
                print(f"line {number}: {reason}{shown}", file=sys.stderr)
        return out


def _lines_of(
    first: int, raw: list[bytes | TooLong], picked: Iterable[int] | None = None
) -> list[tuple[int, str | None]]:
    """``(line number, text)`` of the lines of a read (``picked``: of these indexes only)."""
    out: list[tuple[int, str | None]] = []
    for k in range(len(raw)) if picked is None else picked:
        item = raw[k]
        out.append((first + k, None if isinstance(item, TooLong) else line_text(item, first + k)))
    return out


def _encode(texts: list[str]) -> list[bytes]:
    return [text.encode("utf-8", "surrogateescape") for text in texts]


def run(args: argparse.Namespace) -> int:
    flt = load_filter(args)
    only = frozenset(args.only) if args.only else None
    jsonl = args.format == "jsonl"
    per_line = _Lines(flt, only, jsonl)
    # Text output: each read answered by one compiled call, the lines it leaves per line.
    reply = _filter_reply
    compiled = None if jsonl or reply is None else flt.compiled
    if compiled is not None and not compiled.complete:  # another layer decides after it
        compiled = None
    if compiled is not None:
        names = tuple(
            tuple(name.encode("utf-8", "surrogateescape") for name in names)
            for names in (compiled.categories, compiled.sources)
        )
        bits = sum(bit for action, bit in _ONLY_BITS.items() if only is None or action in only)
    binary = _output()
    for first, raw in stdin_raw_batches():
        if compiled is not None and reply is not None and TooLong not in map(type, raw):
            out, holes = reply(raw, compiled.view, compiled.layout, compiled.mask, *names, bits)
            texts = per_line(_lines_of(first, raw, (k for k, _ in holes))) if holes else []
            data = fill_holes(out, holes, _encode(texts))
        else:
            data = b"".join(_encode(per_line(_lines_of(first, raw))))
        if binary is not None:
            binary.write(data)
            binary.flush()
        else:
            sys.stdout.write(data.decode("utf-8", "surrogateescape"))
    if per_line.rejected:
        print(f"urlsieve filter: {per_line.rejected} input line(s) rejected", file=sys.stderr)
        return 1
    return 0
