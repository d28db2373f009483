"""``urlsieve check``, ``explain`` and ``filter``, in-process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.needs import missing
from urlsieve.cli import main

CONSOLE = (
    "import sys; from urlsieve.cli import console_main; sys.argv[0] = 'urlsieve'; console_main()"
)


@pytest.fixture
def lists(tmp_path: Path) -> Path:
    (tmp_path / "bad.txt").write_text("evil.com\n@@evil.com/public/\nnot a rule\n", "utf-8")
    (tmp_path / "ok.txt").write_text("good.evil.com\n", "utf-8")
    return tmp_path


def run(monkeypatch: pytest.MonkeyPatch, argv: list[str], stdin: str = "") -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main(argv)


def test_check_urls_after_lists(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    status = run(
        monkeypatch,
        ["check", "--lists", bad, "--allow", str(lists / "ok.txt"), "WWW.EVIL.com", "a.org"],
    )
    out, err = capsys.readouterr()
    assert status == 3  # something blocked
    assert out.splitlines() == [f"block\tbad\t{bad}:1\tWWW.EVIL.com", "none\t-\t-\ta.org"]
    assert f"{bad}:3: whitespace inside a pattern" in err


def test_check_exit_statuses(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    assert run(monkeypatch, ["check", "--lists", bad, "--", "good.evil.com.org"]) == 0
    assert run(monkeypatch, ["check", "--lists", bad, "--", "javascript:x", "evil.com"]) == 1
    assert run(monkeypatch, ["check", "--lists", bad, "--strict", "--", "a.org"]) == 2
    assert run(monkeypatch, ["check", "a.org"]) == 2  # no lists
    assert run(monkeypatch, ["check", "--lists", str(lists / "nope.txt"), "a.org"]) == 2
    err = capsys.readouterr().err
    assert "line 1: unsupported scheme 'javascript'" in err
    assert f"{bad}:3: whitespace" in err
    assert "no rules: give --lists" in err
    assert "--lists: no such file or directory" in err


def test_check_jsonl(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    run(monkeypatch, ["check", "--lists", bad, "--format", "jsonl", "http://evil.com/public/x"])
    record = json.loads(capsys.readouterr().out)
    assert record["action"] == "allow"
    assert record["canonical"] == "http://evil.com/public/x"
    assert record["rule"] == {
        "pattern": "evil.com/public/",
        "action": "allow",
        "category": "bad",
        "source": bad,
        "line": 2,
    }


def test_explain(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    status = run(monkeypatch, ["explain", "--lists", bad, "HTTP://x.Evil.com:80/a/../public/y"])
    out = capsys.readouterr().out
    assert status == 0
    assert "canonical: http://x.evil.com/public/y" in out
    assert "  evil.com/public/" in out
    assert f"decision:  allow by 'evil.com/public/' (category bad, {bad}:2)" in out
    assert run(monkeypatch, ["explain", "--lists", bad]) == 2


def test_filter_stream(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    stdin = "\ufeffhttp://evil.com/x\r\njavascript:alert(1)\nhttp://evil.com/public/\n\na.org\n"
    status = run(monkeypatch, ["filter", "--lists", bad], stdin)
    out, err = capsys.readouterr()
    assert status == 1
    # One output line per input line, so the output can be pasted beside the input.
    assert out.splitlines() == [
        f"block\tbad\t{bad}:1\thttp://evil.com/x",
        "invalid\t-\t-\tjavascript:alert(1)",
        f"allow\tbad\t{bad}:2\thttp://evil.com/public/",
        "",  # a blank line: no URL, no error, a blank output line
        "none\t-\t-\ta.org",
    ]
    assert "line 2: unsupported scheme" in err
    assert "line 4" not in err  # a blank line is not worth a report
    assert "1 input line(s) rejected" in err
    assert run(monkeypatch, ["filter", "--lists", bad], "a.org\n\n") == 0


def test_filter_only_and_jsonl(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = str(lists / "bad.txt")
    stdin = "evil.com\na.org\nevil.com/public/\n"
    assert run(monkeypatch, ["filter", "--lists", bad, "--only", "block"], stdin) == 0
    assert capsys.readouterr().out == f"block\tbad\t{bad}:1\tevil.com\n"
    argv = ["filter", "--lists", bad, "--only", "none", "--only", "allow", "--format", "jsonl"]
    assert run(monkeypatch, argv, stdin) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["url"], r["action"]) for r in records] == [
        ("a.org", "none"),
        ("evil.com/public/", "allow"),
    ]
    argv = ["filter", "--lists", bad, "--only", "invalid", "--format", "jsonl"]
    assert run(monkeypatch, argv, "evil.com\nmailto:x\n") == 1
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["action"] == "invalid" and "unsupported scheme" in record["error"]


def test_filter_console_script_streams_binary_safely(lists: Path) -> None:
    bad = str(lists / "bad.txt")
    stdin = b"http://evil.com/\xff\nhttp://b.org/\xc3\xa9\n" * 3
    proc = subprocess.run(
        [sys.executable, "-c", CONSOLE, "filter", "--lists", bad],
        input=stdin,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"block\tbad\t{bad}:1\t".encode() + b"http://evil.com/\xff"
    assert lines[1] == b"none\t-\t-\thttp://b.org/\xc3\xa9"
    assert len(lines) == 6


def test_progress_bar_on_a_terminal_for_large_lists(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from urlsieve.cli import _lists

    monkeypatch.setattr(_lists, "PROGRESS_BYTES", 0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = _lists._Bar(100)
    bar(50)
    assert "loading lists [###############" in capsys.readouterr().err
    assert run(monkeypatch, ["check", "--lists", str(lists / "ok.txt"), "a.org"]) == 0
    err = capsys.readouterr().err
    assert "loading lists [" in err
    assert err.endswith("\r")  # the bar is cleared before output


def test_unreadable_list_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("evil.com\n")
    real_open, real_read = Path.open, Path.read_text

    def refuse(path: Path) -> None:
        if path == secret:
            raise PermissionError(13, "Permission denied", str(path))

    def open_(self: Path, *args: Any, **kwargs: Any) -> Any:
        refuse(self)
        return real_open(self, *args, **kwargs)

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        refuse(self)
        return real_read(self, *args, **kwargs)

    # Root reads any file whatever its mode, so the refusal is made here.
    monkeypatch.setattr(Path, "open", open_)
    monkeypatch.setattr(Path, "read_text", read_text)
    assert run(monkeypatch, ["check", "--lists", str(secret), "--", "evil.com"]) == 2
    err = capsys.readouterr().err
    assert f"{secret}: cannot read (Permission denied)" in err


def test_a_compiled_snapshot_can_be_given_as_the_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lists = tmp_path / "l.txt"
    lists.write_text("evil.com\n")
    snap = tmp_path / "rules.snap"
    assert run(monkeypatch, ["compile", "--lists", str(lists), "-o", str(snap)]) == 0
    capsys.readouterr()
    assert run(monkeypatch, ["check", "--lists", str(snap), "--", "www.evil.com/x"]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("block\t") and err == ""
    assert run(monkeypatch, ["check", "--lists", str(snap), str(lists), "--", "a.com"]) == 2
    assert "is a compiled snapshot" in capsys.readouterr().err


def test_lists_without_rules_are_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(monkeypatch, ["check", "--lists", str(empty), "--", "a.com"]) == 0
    assert "the lists gave no rules" in capsys.readouterr().err


def test_filter_over_long_line_is_invalid_with_its_reason_and_the_stream_goes_on(
    lists: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from urlsieve.cli._io import MAX_INPUT_LINE

    bad = str(lists / "bad.txt")
    stdin = f"a.org\n{'a' * (MAX_INPUT_LINE + 1)}\nhttp://evil.com/x\n"
    assert run(monkeypatch, ["filter", "--lists", bad, "--format", "jsonl"], stdin) == 1
    out, err = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["action"] for r in records] == ["none", "invalid", "block"]
    assert records[1]["error"] == f"line longer than {MAX_INPUT_LINE} bytes: skipped"
    assert f"line 2: line longer than {MAX_INPUT_LINE} bytes" in err


# -- the compiled text output (issue 10): one call a read, the per-line path's bytes ----------

_filter_reply = getattr(
    __import__("urlsieve._accel", fromlist=["speedups"]).speedups, "filter_reply", None
)
_FILTER_LINES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "evil.com",
                "http://EVIL.com/public/../x\r",
                "https://good.evil.com:443/a",
                "evil.com/public/a?b",
                "a.org",
                "\ufeffevil.com",
                " evil.com",
                "evil.com\t",
                "javascript:x",
                "http://evil.com/\udcff",
                "",
                "\r",
                "http://[::1]/",
                "sub.nosrc.test/x",
            ]
        ),
        st.text(max_size=30),
    ),
    max_size=12,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_FILTER_LINES, only=st.sets(st.sampled_from(["block", "allow", "none", "invalid"])))
def test_filter_compiled_output_equals_the_per_line_path(
    lists: Path,
    capsysbinary: pytest.CaptureFixture[bytes],
    monkeypatch: pytest.MonkeyPatch,
    lines: list[str],
    only: set[str],
) -> None:
    """Both paths write the same bytes, report the same lines and exit alike: rules with and
    without a source line, allow rules, blanks, BOM, CRLF, invalid and non-ASCII lines."""
    import urlsieve.cli.filter as filter_cli

    if _filter_reply is None:
        missing("urlsieve._speedups lacks filter_reply: a stale build (urlsieve doctor)")
    (lists / "more.txt").write_text("evil.com/public/a?b\n", "utf-8")
    argv = ["filter", "--lists", str(lists / "bad.txt"), str(lists / "more.txt")]
    argv += [arg for action in sorted(only) for arg in ("--only", action)]
    stdin = "".join(f"{line}\n" for line in lines)
    results = []
    for compiled in (filter_cli._filter_reply, None):
        monkeypatch.setattr(filter_cli, "_filter_reply", compiled)
        status = run(monkeypatch, argv, stdin)
        results.append((status, *capsysbinary.readouterr()))
    assert results[0] == results[1]


def test_filter_compiled_output_answers_plain_lines_in_c(lists: Path) -> None:
    """The compiled call writes the plain lines itself (a call that left every line to the
    per-line path would pass the differential test above)."""
    if _filter_reply is None:
        missing("urlsieve._speedups lacks filter_reply: a stale build (urlsieve doctor)")
    from urlsieve import Filter

    bad = str(lists / "bad.txt")
    image = Filter.from_lists([bad]).compiled
    assert image is not None
    names = [tuple(n.encode() for n in image.categories), tuple(n.encode() for n in image.sources)]
    raw = [b"http://EVIL.com/x\r", b"a.org", b"evil.com/public/", b"javascript:x", b" a.org"]
    out, holes = _filter_reply(raw, image.view, image.layout, image.mask, *names, 7)
    assert (
        out
        == (
            f"block\tbad\t{bad}:1\thttp://EVIL.com/x\nnone\t-\t-\ta.org\n"
            f"allow\tbad\t{bad}:2\tevil.com/public/\n"
        ).encode()
    )
    assert holes == [(3, len(out)), (4, len(out))]
    allowed = f"allow\tbad\t{bad}:2\tevil.com/public/\n".encode()
    only_allow = _filter_reply(raw, image.view, image.layout, image.mask, *names, 2)
    assert only_allow == (allowed, [(3, len(allowed)), (4, len(allowed))])
    # A rule without a source is "-" (Rule.where), one without a line its source alone.
    from urlsieve.rules.model import BLOCK, parse_rule

    bare = Filter([parse_rule("evil.com", BLOCK, "c"), parse_rule("b.org", BLOCK, "c", "s")])
    image2 = bare.compiled
    assert image2 is not None
    names2 = [
        tuple(n.encode() for n in image2.categories),
        tuple(n.encode() for n in image2.sources),
    ]
    answered = _filter_reply([b"evil.com", b"b.org"], image2.view, image2.layout, None, *names2, 7)
    assert answered == (b"block\tc\t-\tevil.com\nblock\tc\ts\tb.org\n", [])
    with pytest.raises(TypeError):
        _filter_reply(raw, image.view, image.layout, image.mask, image.categories, names[1], 7)
    with pytest.raises(TypeError):
        _filter_reply([*raw, "a.org"], image.view, image.layout, image.mask, *names, 7)
    with pytest.raises(ValueError):
        _filter_reply(raw, image.view, (1 << 40, *image.layout[1:]), image.mask, *names, 7)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.binary(max_size=100), max_size=10), only=st.integers(0, 7))
def test_filter_compiled_output_takes_any_bytes(lines: list[bytes], only: int) -> None:
    if _filter_reply is None:
        missing("urlsieve._speedups lacks filter_reply: a stale build (urlsieve doctor)")
    from urlsieve import Filter

    image = Filter.from_rules(["evil.com", "@@evil.com/ok/"]).compiled
    assert image is not None
    names = [tuple(n.encode() for n in image.categories), tuple(n.encode() for n in image.sources)]
    out, holes = _filter_reply(lines, image.view, image.layout, image.mask, *names, only)
    assert out.count(b"\n") + len(holes) <= len(lines)
    assert [at for _, at in holes] == sorted(at for _, at in holes)
