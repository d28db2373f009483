from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

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
    assert "line 3" not in err  # a blank line is no URL and no error: skipped
    assert "4 read, 2 new, 1 seen, 1 rejected" in err


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


# -- marking and printing are never separated (issue 9, item 10) --------------------------


def _seen_in_store(spec: str, urls: list[str]) -> list[bool]:
    from urlsieve.seen import open_seen

    with open_seen(spec) as store:
        return list(store.contains_many(urls))


def test_an_interrupt_finishes_the_batch_flushes_and_exits_130(tmp_path: Path) -> None:
    spec = f"exact:{tmp_path}/s"
    proc = subprocess.Popen(
        [sys.executable, "-c", CONSOLE, "dedup", "--store", spec, "--batch", "500"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    urls = [f"http://h{i}.example/" for i in range(2000)]
    proc.stdin.write("".join(u + "\n" for u in urls).encode())  # 4 whole batches
    proc.stdin.write(b"http://partial.example/")  # a line still being read: not marked
    proc.stdin.flush()
    printed: list[str] = []
    while len(printed) < 2000:  # every batch answered: the helper now waits for input
        printed.append(proc.stdout.readline().decode().rstrip("\n"))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    printed += out.decode().splitlines()
    assert proc.returncode == 130, err
    assert "SIGINT: stopped after a whole batch" in err.decode()
    assert "2,000 read, 2,000 new" in err.decode()
    assert printed == urls
    # Every URL the store holds was printed; the partial line was neither.
    assert all(_seen_in_store(spec, urls))
    assert _seen_in_store(spec, ["http://partial.example/"]) == [False]


def _feed(stdin: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):
        stdin.write(data)
    with contextlib.suppress(BrokenPipeError):
        stdin.close()


def test_a_closed_output_reports_the_urls_marked_but_not_delivered(tmp_path: Path) -> None:
    spec = f"exact:{tmp_path}/s"
    urls = [f"http://h{i}.example/{'p' * 200}" for i in range(3000)]
    reader_r, reader_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", CONSOLE, "dedup", "--store", spec, "--batch", "1000"],
        stdin=subprocess.PIPE,
        stdout=reader_w,
        stderr=subprocess.PIPE,
    )
    os.close(reader_w)
    assert proc.stdin is not None and proc.stderr is not None
    feed = threading.Thread(
        target=lambda: _feed(proc.stdin, "".join(u + "\n" for u in urls).encode())
    )
    feed.start()
    with os.fdopen(reader_r, "rb") as reader:  # like `| head -n 5`: read a little, then leave
        head = [reader.readline() for _ in range(5)]
    feed.join(timeout=60)
    text = proc.stderr.read().decode()
    proc.stderr.close()
    proc.wait(timeout=60)
    assert proc.returncode == 141, text
    assert [h.decode().rstrip("\n") for h in head] == urls[:5]
    match = re.search(r"([\d,]+) URL\(s\) marked seen in the store were not delivered", text)
    assert match is not None, text
    lost = int(match.group(1).replace(",", ""))
    lines = re.search(r"input lines ([\d, -]+)\)", text)
    assert lines is not None
    # The report names exactly the URLs the store marked that the reader never got whole.
    marked = sum(_seen_in_store(spec, urls))
    assert 0 < lost <= marked <= 3000
    first = int(lines.group(1).split("-")[0].split(",")[0])
    assert first > 5


def test_blank_and_over_long_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from urlsieve.cli._io import MAX_INPUT_LINE

    stdin = f"\n   \nhttp://a.example/\n{'x' * (MAX_INPUT_LINE + 1)}\nhttp://b.example/\n"
    status, out, err = dedup(["--store", "memory:"], stdin, monkeypatch, capsys)
    assert status == 1
    assert out.splitlines() == ["http://a.example/", "http://b.example/"]
    assert f"line 4: line longer than {MAX_INPUT_LINE} bytes" in err
    assert "line 1" not in err and "line 2" not in err
    assert "3 read, 2 new, 0 seen, 1 rejected" in err
    assert "{" not in err and "[" not in err  # statistics as lines a person reads, not reprs


def test_error_lines_do_not_run_into_the_progress_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stdin = "http://a.example/\njavascript:x\nhttp://b.example/\n"
    argv = ["--store", "memory:", "--progress", "--batch", "1"]
    _, _, err = dedup(argv, stdin, monkeypatch, capsys)
    # Each error starts a line of its own: the progress line is cleared before it.
    assert "\r\x1b[Kline 2: unsupported scheme" in err
    for line in err.split("\n"):
        assert "URLs/s" not in line or "line 2" not in line
