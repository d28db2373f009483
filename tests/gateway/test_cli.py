"""``urlsieve compile`` and ``urlsieve config check``, in-process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.gateway.servers import free_port
from urlsieve import Filter
from urlsieve.cli import main
from urlsieve.match.snapshot import FORMAT_VERSION, read_snapshot_info

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "urlsieve" / "data" / "sample-lists"
TOKEN = "0123456789abcdef-token"


def test_compile_lists_to_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rules.snap"
    assert main(["compile", "--lists", str(SAMPLE), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{out}:" in err and "rules" in err and f"format {FORMAT_VERSION}" in err
    loaded = Filter.load(out)
    reference = Filter.from_lists([SAMPLE])
    assert len(loaded) == len(reference)
    for url in ("http://www.evil.test/x", "http://evil.test/malware-free/", "http://a.org/"):
        assert loaded.check(url) == reference.check(url)
    info = read_snapshot_info(out)
    assert info.meta["lists"] == [str(SAMPLE)]


def test_compile_selected_categories(tmp_path: Path) -> None:
    out = tmp_path / "rules.snap"
    assert (
        main(["compile", "--lists", str(SAMPLE), "--categories", "gambling", "-o", str(out)]) == 0
    )
    loaded = Filter.load(out)
    assert loaded.check("http://casino-royal.test/").blocked
    assert not loaded.check("http://evil.test/").blocked  # phishing is not selected
    assert read_snapshot_info(out).meta["selected_categories"] == ["gambling"]


def test_compile_unknown_category_names_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["compile", "--lists", str(SAMPLE), "--categories", "adult", "-o", str(tmp_path / "x")]
    )
    assert status == 2
    err = capsys.readouterr().err
    assert "categories not found in the lists: adult" in err and "gambling" in err


def test_compile_needs_lists_and_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "-o", "/tmp/never.snap"]) == 2
    assert "nothing to compile" in capsys.readouterr().err
    assert main(["compile", "--lists", str(SAMPLE)]) == 2
    assert "no output" in capsys.readouterr().err


def config_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "urlsieve.toml"
    path.write_text(
        f"""
[rules]
lists = ["{SAMPLE}"]
categories = ["phishing", "malware"]
snapshot = "rules.snap"

[squid]
redirect_url = "http://block.lan/?url=%u&category=%c"

[service]
token = "{TOKEN}"
{extra}
""",
        encoding="utf-8",
    )
    return path


def test_compile_from_config_then_check_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("URLSIEVE_MODE", raising=False)
    path = config_file(tmp_path)
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "does not exist yet: run `urlsieve compile --config" in out
    assert main(["compile", "--config", str(path)]) == 0
    assert (tmp_path / "rules.snap").exists()
    capsys.readouterr()
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "redirects blocked URLs to http://block.lan/" in out
    assert "categories phishing, malware" in out
    assert "configuration OK" in out
    assert TOKEN not in out


def test_config_check_reports_env_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config_file(tmp_path)
    monkeypatch.setenv("URLSIEVE_FAILURE_MODE", "open")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "allow every request and log why (failure_mode=open)  [env:URLSIEVE_FAILURE_MODE]" in out
    assert "environment overrides: URLSIEVE_FAILURE_MODE" in out


def test_config_check_fails_on_contradictions_and_bad_snapshots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = config_file(tmp_path, 'token_file = "/etc/token"')
    assert main(["config", "check", str(bad)]) == 2
    assert "both set: keep one" in capsys.readouterr().err
    good = config_file(tmp_path)
    (tmp_path / "rules.snap").write_bytes(b"garbage" * 100)
    assert main(["config", "check", str(good)]) == 2
    assert "not a urlsieve snapshot" in capsys.readouterr().err


def test_config_check_notices_a_snapshot_for_other_categories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path)
    snap = str(tmp_path / "rules.snap")
    # Compiled from every category: it serves the configured selection, as in the helper.
    assert main(["compile", "--lists", str(SAMPLE), "-o", snap]) == 0
    capsys.readouterr()
    assert main(["config", "check", str(path)]) == 0
    assert "serves the selected categories phishing, malware" in capsys.readouterr().out
    # Compiled for another selection: it cannot serve this one.
    assert main(["compile", "--lists", str(SAMPLE), "--categories", "phishing", "-o", snap]) == 0
    capsys.readouterr()
    assert main(["config", "check", str(path)]) == 2
    assert "was compiled for categories phishing, not malware" in capsys.readouterr().err


def test_compile_to_an_unwritable_place_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lists = tmp_path / "l.txt"
    lists.write_text("evil.com\n")
    for target in (tmp_path, tmp_path / "no" / "such" / "dir" / "r.snap"):
        assert main(["compile", "--lists", str(lists), "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert "cannot write" in err and "Traceback" not in err


# -- serve ---------------------------------------------------------------------------------


def test_serve_on_a_port_in_use_exits_2_not_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 means "blocked" for `check`; uvicorn used to exit 3 for "address in use".
    snapshot = tmp_path / "rules.snap"
    assert main(["compile", "--lists", str(SAMPLE), "-o", str(snapshot)]) == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        status = main(["serve", "--snapshot", str(snapshot), "--bind", f"127.0.0.1:{port}"])
    assert status == 2
    err = capsys.readouterr().err
    assert f"service.bind=127.0.0.1:{port}: cannot listen" in err


def test_serve_that_cannot_start_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "rules.snap"
    assert main(["compile", "--lists", str(SAMPLE), "-o", str(snapshot)]) == 0
    store = f"exact:{tmp_path / 'missing' / 'dir' / 'seen.exact'}"
    argv = ["serve", "--snapshot", str(snapshot), "--seen-store", store]
    status = main([*argv, "--bind", f"127.0.0.1:{free_port()}", "--log-level", "critical"])
    assert status == 2
    assert "the service did not start" in capsys.readouterr().err


def test_serve_help_documents_its_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "SIGHUP reloads the rules" in out
    assert "2 for a configuration error, an address that cannot be bound" in out
