from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from urlsieve.cli import main


def run_cli(
    argv: list[str],
    stdin: str = "",
    capsys: pytest.CaptureFixture[str] | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> int:
    assert monkeypatch is not None
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main(argv)


def test_canon_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status = run_cli(["canon", "HTTP://A.com:80/./x", "example.com"], monkeypatch=monkeypatch)
    out, err = capsys.readouterr()
    assert status == 0
    assert out.splitlines() == ["http://a.com/x", "http://example.com/"]
    assert err == ""


def test_canon_stdin_reports_bad_lines_and_goes_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = "\ufeffhttp://A.com/\r\njavascript:alert(1)\nhttp://b.com/%2e%2e/x\n\nc.com\n"
    status = run_cli(["canon", "-"], stdin, monkeypatch=monkeypatch)
    out, err = capsys.readouterr()
    assert status == 1
    # One output line per input line: empty for a rejected or a blank line.
    assert out.split("\n") == ["http://a.com/", "", "http://b.com/x", "", "http://c.com/", ""]
    assert "line 2: unsupported scheme 'javascript'" in err
    assert "line 4" not in err  # a blank line is not an error
    assert "1 input(s) rejected" in err


def test_canon_jsonl_and_expressions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        run_cli(
            ["canon", "--format", "jsonl", "https://u@x.example.com:8443/a?b"],
            monkeypatch=monkeypatch,
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "canonical": "https://x.example.com/a?b",
        "scheme": "https",
        "host": "x.example.com",
        "port": 8443,
        "path": "/a",
        "query": "b",
        "userinfo": "u",
        "is_ip": False,
    }
    assert (
        run_cli(["canon", "--expressions", "http://x.example.com/a"], monkeypatch=monkeypatch) == 0
    )
    assert capsys.readouterr().out.strip().split("\t") == [
        "x.example.com/a",
        "x.example.com/",
        "example.com/a",
        "example.com/",
    ]


def test_crawler_profile_option(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        run_cli(
            ["canon", "--profile", "crawler", "http://a.com/p?b=2&utm_source=x&a=1"],
            monkeypatch=monkeypatch,
        )
        == 0
    )
    assert capsys.readouterr().out.strip() == "http://a.com/p?a=1&b=2"


def test_console_script_and_broken_pipe() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from urlsieve.cli import console_main; console_main()",
            "canon",
            "-",
        ],
        input="a.com\n" * 50_000,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stdout.count("http://a.com/") == 50_000
