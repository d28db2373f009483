from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from urlsieve.cli import main


def dedup(
    argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    status = main(["dedup", *argv])
    out, err = capsys.readouterr()
    return status, out, err


STREAM = "http://a.example/1\nHTTP://A.EXAMPLE:80/1\nhttp://a.example/2\nhttp://a.example/1#x\n"


@pytest.mark.parametrize("kind", ["memory", "exact", "bloom"])
def test_prints_only_new_urls_as_written(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = "memory:" if kind == "memory" else f"{kind}:{tmp_path}/s"
    status, out, err = dedup(["--store", spec], STREAM, monkeypatch, capsys)
    assert status == 0
    assert out.splitlines() == ["http://a.example/1", "http://a.example/2"]
    assert "4 read, 2 new, 2 seen, 0 rejected" in err
    assert f"backend: {kind}" in err
    if kind != "memory":  # the store persists: a second run prints nothing new
        status, out, err = dedup(["--store", spec, "--batch", "1"], STREAM, monkeypatch, capsys)
        assert out == ""
        assert "4 read, 0 new, 4 seen" in err


def test_print_seen_and_all(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = dedup(["--store", "memory:", "--print", "seen"], STREAM, monkeypatch, capsys)
    assert out.splitlines() == ["HTTP://A.EXAMPLE:80/1", "http://a.example/1#x"]
    _, out, _ = dedup(["--store", "memory:", "--print", "all"], STREAM, monkeypatch, capsys)
    assert out.splitlines() == [
        "new\thttp://a.example/1",
        "seen\tHTTP://A.EXAMPLE:80/1",
        "new\thttp://a.example/2",
        "seen\thttp://a.example/1#x",
    ]


def test_bad_lines_are_reported_with_their_number_and_the_rest_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdin = "http://a.example/\njavascript:alert(1)\n\nhttp://b.example/\nhttp://a.example/\n"
    status, out, err = dedup(["--store", "memory:", "--batch", "3"], stdin, monkeypatch, capsys)
    assert status == 1
    assert out.splitlines() == ["http://a.example/", "http://b.example/"]
    assert "line 2: unsupported scheme 'javascript'" in err
    assert "line 3: empty URL" in err
    assert "5 read, 2 new, 1 seen, 2 rejected" in err


def test_progress_and_profile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdin = "http://a.example/?b=1&utm_source=x\nhttp://a.example/?b=1\n"
    argv = ["--store", "memory:", "--profile", "crawler", "--progress"]
    status, out, err = dedup(argv, stdin, monkeypatch, capsys)
    assert status == 0
    assert out.splitlines() == ["http://a.example/?b=1&utm_source=x"]
    assert "\r2 read, 1 new, 0 rejected" in err
    assert "profile: crawler/" in err


def test_store_errors_exit_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    path.write_text("not a store\n" * 500)
    status, _, err = dedup(["--store", f"bloom:{path}"], STREAM, monkeypatch, capsys)
    assert status == 2
    assert "urlsieve dedup:" in err
    assert "not a urlsieve store" in err
    status, _, err = dedup(["--store", f"exact:{tmp_path}/new?readonly=1"], "", monkeypatch, capsys)
    assert status == 2
    assert "open it once without ?readonly=1" in err


CONSOLE = "from urlsieve.cli import console_main; console_main()"


def test_console_script_streams(tmp_path: Path) -> None:
    urls = "".join(f"http://h{i % 7}.example/{i % 13}\n" for i in range(200))
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE, "dedup", "--store", f"exact:{tmp_path}/s"],
        input=urls,
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(done.stdout.splitlines()) == len(set(urls.splitlines())) == 91


def test_readonly_store_is_looked_up_without_adding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"exact:{tmp_path}/seen.exact"
    monkeypatch.setattr(sys, "stdin", io.StringIO("http://a.example/\n"))
    assert main(["dedup", "--store", spec]) == 0
    capsys.readouterr()
    urls = "http://A.example/\nhttp://b.example/\n"
    for _ in range(2):  # nothing is added: the second run answers the same
        monkeypatch.setattr(sys, "stdin", io.StringIO(urls))
        assert main(["dedup", "--store", spec + "?readonly=1"]) == 0
        out, err = capsys.readouterr()
        assert out == "http://b.example/\n"
        assert "1 new, 1 seen" in err and "read-only: nothing added" in err
