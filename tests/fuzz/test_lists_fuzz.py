"""The list readers over files of hostile bytes, in every format: no exception (bad lines
are reported as ``file:line: reason``), every line counted, and the good lines load."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import FUZZ
from tests.fuzz.corpus import SEEDS
from tests.fuzz.strategies import hostile_lines
from urlsieve import RuleSyntaxError
from urlsieve.rules import FORMATS, load_lists

#: A good line in each format, written after the hostile ones; it must load.
SENTINEL = {
    "plain": b"sentinel.example",
    "hosts": b"0.0.0.0 sentinel.example",
    "adblock": b"||sentinel.example^",
    "csv": b"http://sentinel.example/",
    "squidguard-domains": b"sentinel.example",
    "squidguard-urls": b"sentinel.example/x",
}


def write(directory: Path, fmt: str, body: bytes) -> Path:
    """``body`` then the sentinel line, as a file (or category tree) of format ``fmt``."""
    data = body + SENTINEL[fmt] + b"\n"
    if fmt.startswith("squidguard"):
        category = directory / "tree" / "cat"
        category.mkdir(parents=True)
        (category / fmt.removeprefix("squidguard-")).write_bytes(data)
        return directory / "tree"
    path = directory / f"list.{'csv' if fmt == 'csv' else 'txt'}"
    path.write_bytes(data)
    return path


def check_load(fmt: str, body: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), fmt, body)
        lines = body.count(b"\n") + 1
        if b"\x00" in body[: 1 << 16]:  # binary data: the file is refused, with the reason
            if fmt.startswith("squidguard"):  # in a tree: reported, and the rest loads
                result = load_lists([path])
                assert any("binary data, not a text list" in s for s in result.skipped)
            else:
                with pytest.raises(RuleSyntaxError, match="binary data, not a text list"):
                    load_lists([path], format=fmt)
            return
        result = load_lists([path], format=fmt if fmt in FORMATS else "auto")
        counted = sum(r.lines for r in result.reports)
        assert counted == lines, f"{lines} lines in the file, {counted} counted"
        for report in result.reports:
            assert report.lines == (
                report.rule_lines + report.comments + report.ignored + report.skipped
            )
            for warning in report.warnings:
                assert str(warning).startswith(f"{report.source}:{warning.line}: ")
                assert warning.line is not None and 1 <= warning.line <= report.lines
        sentinel = [r for r in result.rules if r.host == "sentinel.example"]
        assert sentinel, "the good line after the bad ones did not load"
        assert all(r.line == lines for r in sentinel), [(r.line, lines) for r in sentinel]


BODY = b"".join(line + b"\n" for _, line in SEEDS)
FORMAT_IDS = list(SENTINEL)


@pytest.mark.parametrize("fmt", FORMAT_IDS)
def test_every_format_reads_the_corpus(fmt: str) -> None:
    check_load(fmt, BODY)


@pytest.mark.parametrize("fmt", ["plain", "hosts", "adblock"])
def test_auto_format_reads_the_corpus(fmt: str, tmp_path: Path) -> None:
    path = write(tmp_path, fmt, BODY)
    result = load_lists([path])  # sniffed: no exception, every line counted
    assert sum(r.lines for r in result.reports) == BODY.count(b"\n") + 1


@FUZZ
@given(fmt=st.sampled_from(FORMAT_IDS), lines=st.lists(hostile_lines, max_size=20))
def test_any_bytes_in_any_format(fmt: str, lines: list[bytes]) -> None:
    check_load(fmt, b"".join(line + b"\n" for line in lines))
