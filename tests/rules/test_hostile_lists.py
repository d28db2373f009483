"""List files are hostile bytes too (issue 9): every reader is linear, caps its lines,
keeps bytes that are not UTF-8, refuses binary data, reads gzip, and reports a bad line
as ``file:line: reason`` while the good lines still load."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from urlsieve import Filter, RuleSyntaxError
from urlsieve.cli import main
from urlsieve.rules import load as load_module
from urlsieve.rules import load_lists
from urlsieve.rules.readers import MAX_LINE_LENGTH


def test_a_long_colon_line_is_sniffed_and_reported_in_linear_time(tmp_path: Path) -> None:
    # The hosts sniffing pattern backtracked on "a:a:a…" (quadratic: this line hung loading).
    path = tmp_path / "list.txt"
    path.write_text("a:" * 30_000 + "\ngood.example\n")
    flt = Filter.from_lists([path])
    assert flt.check("http://good.example/").action == "block"
    assert [w.line for w in flt.warnings] == [1]


def test_an_over_long_line_is_reported_and_the_rest_loads(tmp_path: Path) -> None:
    path = tmp_path / "list.txt"
    path.write_text(f"ok.example\n{'a' * (MAX_LINE_LENGTH + 1)}.com\nalso.example\n")
    flt = Filter.from_lists([path])
    assert [str(w) for w in flt.warnings] == [
        f"{path}:2: line longer than {MAX_LINE_LENGTH} characters ({MAX_LINE_LENGTH + 5})"
    ]
    assert flt.check("http://also.example/").action == "block"


def test_bytes_that_are_not_utf8_stay_bytes(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"x.example/caf\xe9\nbad\xff host\n")
    flt = Filter.from_lists([path])
    assert flt.check("http://x.example/caf%E9/menu").action == "block"
    assert flt.check(b"http://x.example/caf\xe9").action == "block"
    assert [w.line for w in flt.warnings] == [2]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x7fELF\x02\x01\x01" + bytes(64), "binary data, not a text list"),
        (b"evil.example\n\x00\x01\x02", "binary data, not a text list (a NUL byte at offset 13)"),
        (bytes(257) + b"ustar\x0000" + bytes(200), "a tar archive, not a list"),
        (b"\x1f\x8b\x08\x00garbage", "damaged gzip data"),
    ],
)
def test_a_file_that_is_not_a_text_list_is_refused(
    tmp_path: Path, content: bytes, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "list.txt"
    path.write_bytes(content)
    with pytest.raises(RuleSyntaxError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        load_lists([path])
    assert main(["check", "--lists", str(path), "--", "http://x.example/"]) == 2
    assert f"{path}: {reason}" in capsys.readouterr().err


def test_gzip_lists_are_read_and_a_bomb_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hosts.txt.gz"
    path.write_bytes(gzip.compress(b"0.0.0.0 evil.example\n0.0.0.0 bad.example\n"))
    flt = Filter.from_lists([path])
    assert flt.check("http://bad.example/").action == "block"
    assert flt.check("http://bad.example/").category == "hosts"
    assert flt.reports[0].format == "hosts"
    monkeypatch.setattr(load_module, "MAX_LIST_BYTES", 1000)
    path.write_bytes(gzip.compress(b"a" * 100_000))
    with pytest.raises(RuleSyntaxError, match="decompresses to more than 1000 bytes"):
        load_lists([path])


def test_a_symlink_loop_in_a_tree_is_reported_and_the_rest_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "bl"
    (root / "ads").mkdir(parents=True)
    (root / "ads" / "domains").write_text("ads.example\n")
    (root / "loop").symlink_to(root / "loop")
    (root / "dangling").symlink_to(root / "nowhere")
    flt = Filter.from_lists([root])
    assert flt.check("http://ads.example/").action == "block"
    assert any("loop" in s and "unusable symlink" in s for s in flt.skipped)
    assert any("dangling" in s for s in flt.skipped)
    out = tmp_path / "r.snap"
    assert main(["compile", "--lists", str(root), "-o", str(out)]) == 0
    assert main(["check", "--lists", str(root), "--", "http://ads.example/"]) == 3
    assert "unusable symlink" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["auto", "plain", "hosts", "adblock", "csv"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=400))
def test_any_bytes_as_a_list_load_or_are_reported(tmp_path: Path, fmt: str, data: bytes) -> None:
    path = tmp_path / "fuzz.txt"
    path.write_bytes(data)
    try:
        result = load_lists([path], format=fmt)
    except RuleSyntaxError as exc:  # the whole file refused: binary, gzip, tar
        assert str(exc).startswith(f"{path}: ")
        return
    for warning in result.warnings:
        assert str(warning).startswith(f"{path}:")
    report = result.reports[0]
    assert report.lines == report.rule_lines + report.comments + report.ignored + report.skipped


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(
        st.sampled_from(["domains", "urls", "expressions", "usage"]), st.binary(max_size=200)
    )
)
def test_any_bytes_in_a_category_tree_load_or_are_reported(
    tmp_path: Path, files: dict[str, bytes]
) -> None:
    root = tmp_path / "tree"
    category = root / "cat"
    category.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(category):
        (category / name).unlink()
    for name, content in files.items():
        (category / name).write_bytes(content)
    try:
        Filter.from_lists([root])
    except RuleSyntaxError as exc:
        assert str(exc).startswith(str(category))
