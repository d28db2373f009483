"""The Quick start's first command: ``urlsieve demo`` on the bundled sample data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from urlsieve.cli import main


def _rows(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        parts = re.split(r"\s{2,}|\s(?=block|allow|none|invalid)", line.strip(), maxsplit=1)
        if len(parts) == 2 and ("://" in parts[0] or parts[0].startswith("javascript")):
            rows[parts[0]] = parts[1].split()
    return rows


def test_demo_filters_and_deduplicates_the_samples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    # Every evasion spelling of a listed site is blocked, with its category.
    for spelling in (
        "HTTP://WWW.Example-Tracker.TEST:80/./banner.js#x",
        "http://%63asino-royal.test/jackpot",
        "http://3232235777/admin",
        "http://0xC0.0xA8.0x01.0x01/admin",
        "http://0300.0250.01.01/admin",
        "http://evil.test\\@good.test/",
        "http://evil.test/malware/%2e%2e/malware/payload.exe",
        "http://WWW.ÜMLAUT-shop.test/angebot",
    ):
        assert rows[spelling][0] == "block", spelling
    assert rows["http://3232235777/admin"][1] == "remote-admin"
    assert "(remote-admin/urls:" in out
    # A more specific allow rule opens a path of a blocked site; userinfo is not the host.
    assert rows["http://evil.test/malware-free/readme"][:2] == ["allow", "allowed"]
    assert rows["http://user@casino-royal.test.@example.org/"][0] == "none"
    assert rows["javascript:alert(1)"][0] == "invalid"
    assert "14 valid requests" in out
    assert "11 distinct URLs, 3 repeats in other spellings" in out


def test_demo_into_a_given_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"bloom:{tmp_path}/demo.bloom"
    assert main(["demo", "--store", spec]) == 0
    assert main(["demo", "--store", spec]) == 0  # the store persists: nothing is new now
    out = capsys.readouterr().out
    assert "11 distinct URLs" in out
    assert "0 distinct URLs, 14 repeats" in out
