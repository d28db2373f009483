"""``urlsieve filter``, ``canon`` and ``dedup`` in-process over hostile byte streams: no
exception escapes, every input line is answered (aligned for filter and canon), and no
spelling of a blocked URL passes ``filter``."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import FUZZ
from tests.fuzz.corpus import SEEDS
from tests.fuzz.drivers import input_lines, output_lines, run_cli, stream
from tests.fuzz.policy import NOT_BLOCKED, write_lists
from tests.fuzz.strategies import blocked_spellings, hostile_lines
from urlsieve.cli._io import MAX_INPUT_LINE

CORPUS = stream([line for _, line in SEEDS])


@pytest.fixture(scope="module")
def lists(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    block, allow = write_lists(tmp_path_factory.mktemp("lists"))
    return ["--lists", str(block), "--allow", str(allow)]


def echo(line: bytes, number: int) -> bytes:
    """What ``filter`` echoes of an input line: without one trailing CR (a CRLF line end; more
    CRs are the line's own) and, on line 1, its BOM."""
    text = line[:-1] if line.endswith(b"\r") else line
    return text[3:] if number == 1 and text.startswith(b"\xef\xbb\xbf") else text


def check_filter(data: bytes, lists: list[str]) -> list[bytes]:
    done = run_cli(["filter", *lists], data)
    assert done.status in (0, 1), f"exit status {done.status}: {done.err[-500:]!r}"
    lines, out = input_lines(data), output_lines(done.out)
    assert len(out) == len(lines), f"{len(lines)} input lines, {len(out)} output lines"
    for number, (line, answer) in enumerate(zip(lines, out, strict=True), 1):
        text = echo(line, number)
        if len(line) > MAX_INPUT_LINE:  # skipped as it was read, never buffered: not echoed
            assert answer == b"invalid\t-\t-\t", f"line {number}: {answer[:200]!r}"
        elif not text.strip():  # a blank line: no URL and no error, a blank output line
            assert answer == b"", f"line {number}: {answer[:200]!r}"
        else:
            assert answer.endswith(b"\t" + text), f"line {number}: {answer[:200]!r}"
    return [answer.split(b"\t", 1)[0] for answer in out]


def check_canon(argv: list[str], data: bytes) -> None:
    done = run_cli(["canon", *argv, "-"], data)
    assert done.status in (0, 1), f"exit status {done.status}: {done.err[-500:]!r}"
    lines, out = input_lines(data), output_lines(done.out)
    assert len(out) == len(lines), f"{len(lines)} input lines, {len(out)} output lines"


def check_dedup(data: bytes) -> None:
    done = run_cli(["dedup", "--store", "memory:", "--print", "all", "-"], data)
    assert done.status in (0, 1), f"exit status {done.status}: {done.err[-500:]!r}"
    # A blank line is no URL and no error: dedup skips it without counting it.
    lines = [line for line in input_lines(data) if line.rstrip(b"\r").strip()]
    printed = output_lines(done.out)
    assert all(p.startswith((b"new\t", b"seen\t")) for p in printed)
    assert f"{len(lines):,} read".encode() in done.err, done.err[-300:]
    rejected = done.err.count(b"\nline ") + done.err.startswith(b"line ")
    assert len(printed) + rejected == len(lines), (
        f"{len(lines)} lines: {len(printed)} printed + {rejected} reported"
    )


# -- the seed corpus ---------------------------------------------------------------------


def test_filter_answers_the_corpus_line_for_line(lists: list[str]) -> None:
    check_filter(CORPUS, lists)


@pytest.mark.parametrize(
    "argv", [[], ["--format", "jsonl"], ["--expressions"], ["--profile", "crawler"]], ids=str
)
def test_canon_answers_the_corpus_line_for_line(argv: list[str]) -> None:
    check_canon(argv, CORPUS)


def test_dedup_accounts_for_every_corpus_line() -> None:
    check_dedup(CORPUS)


def test_filter_jsonl_is_one_json_record_per_line(lists: list[str]) -> None:
    done = run_cli(["filter", *lists, "--format", "jsonl"], CORPUS)
    records = output_lines(done.out)
    assert len(records) == len(input_lines(CORPUS))
    for record in records:
        json.loads(record)


def test_filter_blocks_the_seed_bypasses_and_not_the_allowed(lists: list[str]) -> None:
    from tests.fuzz.test_helper_fuzz import BLOCKED_LINES

    urls = [line.split(b" ", 1)[0] for line in BLOCKED_LINES if b"CONNECT" not in line]
    actions = check_filter(stream(urls), lists)
    wrong = [
        (u[:80], a) for u, a in zip(urls, actions, strict=True) if a not in (b"block", b"invalid")
    ]
    assert not wrong, f"passed filter: {wrong}"
    actions = check_filter(stream(NOT_BLOCKED), lists)
    assert all(a in (b"none", b"allow") for a in actions), list(
        zip(NOT_BLOCKED, actions, strict=True)
    )


# -- generated streams -------------------------------------------------------------------


@FUZZ
@given(lines=st.lists(hostile_lines, max_size=20), end=st.sampled_from([b"", b"\r", b"\n"]))
def test_filter_any_stream(lists: list[str], lines: list[bytes], end: bytes) -> None:
    check_filter(stream(lines) + end, lists)


@FUZZ
@given(lines=st.lists(hostile_lines, max_size=20), profile=st.sampled_from(["filter", "crawler"]))
def test_canon_any_stream(lines: list[bytes], profile: str) -> None:
    check_canon(["--profile", profile], stream(lines))


@FUZZ
@given(lines=st.lists(hostile_lines, max_size=20))
def test_dedup_any_stream(lines: list[bytes]) -> None:
    check_dedup(stream(lines))


@FUZZ
@given(urls=st.lists(blocked_spellings(), min_size=1, max_size=10))
def test_filter_blocks_every_spelling(lists: list[str], urls: list[bytes]) -> None:
    actions = check_filter(stream(urls), lists)
    wrong = [(u, a) for u, a in zip(urls, actions, strict=True) if a != b"block"]
    assert not wrong, f"blocked URLs that filter did not block: {wrong}"
