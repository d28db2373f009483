"""A policy error is said once, at start, with ``file:line``: a list line that cannot be
read is skipped and the rest of the policy is in force (the helper, ``config check`` and
``import squidguard`` all say so); a policy that cannot load at all puts the helper in
its failure mode with one line, not one per request."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from urlsieve.cli import main

REQUESTS = 2000


def _tree(root: Path, iplist: bytes) -> Path:
    db = root / "db"
    (db / "porn").mkdir(parents=True)
    (db / "porn" / "domains").write_text("porn.example\n")
    (db / "pupils.ips").write_bytes(iplist)
    (db / "staff.users").write_bytes(b"Alice\n \nbob\n")
    conf = root / "squidGuard.conf"
    conf.write_text(
        f"dbhome {db}\n"
        "dest porn {\n domainlist porn/domains\n}\n"
        "src staff {\n userlist staff.users\n}\n"
        "src pupils {\n iplist pupils.ips\n}\n"
        "acl {\n"
        " staff {\n pass all\n }\n"
        " pupils {\n pass !porn all\n redirect http://block.test/?u=%u\n }\n"
        " default {\n pass none\n redirect http://block.test/default\n }\n"
        "}\n"
    )
    return conf


def _helper(conf: Path, lines: list[str]) -> tuple[list[str], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "urlsieve", "squid-helper", "--squidguard-conf", str(conf)],
        input="".join(f"{line}\n" for line in lines).encode(),
        capture_output=True,
        timeout=120,
        check=True,
    )
    return proc.stdout.decode().splitlines(), proc.stderr.decode()


def test_a_bad_iplist_line_is_said_once_and_the_rest_of_the_policy_holds(tmp_path: Path) -> None:
    conf = _tree(tmp_path, b"10.0.0.0/24\n10.0.1.0/33\n10.0.2.1-10.0.2.9 # lab\n")
    ips = tmp_path / "db" / "pupils.ips"
    users = tmp_path / "db" / "staff.users"
    lines = []
    for k in range(REQUESTS // 4):
        lines += [
            f"http://porn.example/{k} 10.0.0.{k % 200 + 1}/- - GET",  # pupil: blocked
            f"http://wiki.test/{k} 10.0.2.{k % 9 + 1}/- - GET",  # pupil (range): passes
            f"http://porn.example/{k} 192.0.2.1/- alice GET",  # staff: passes
            f"http://wiki.test/{k} 192.0.2.1/- - GET",  # nobody: default blocks
        ]
    replies, log = _helper(conf, lines)
    assert len(replies) == len(lines)
    for k in range(0, len(lines), 4):
        assert replies[k].startswith('OK rewrite-url="http://block.test/?u=http://porn')
        assert replies[k + 1] == "ERR"
        assert replies[k + 2] == "ERR"
        assert replies[k + 3] == 'OK rewrite-url="http://block.test/default"'
    said = log.splitlines()
    assert sum(f"{ips}:2: '10.0.1.0/33': prefix /33 is not 0-32" in s for s in said) == 1
    assert sum(f"{users}:2: a line of blanks or commas only" in s for s in said) == 1
    assert sum("policy loaded without 2 list lines" in s for s in said) == 1
    assert len(said) < 20, log  # nothing per request


def test_a_policy_that_cannot_load_says_so_once_not_per_request(tmp_path: Path) -> None:
    conf = _tree(tmp_path, b"10.0.0.0/24\n")
    (tmp_path / "db" / "pupils.ips").unlink()
    replies, log = _helper(conf, [f"http://wiki.test/{k} 10.0.0.1/- - GET" for k in range(500)])
    assert len(replies) == 500
    assert all(r.startswith("OK ") for r in replies)  # fail-closed: every request blocked
    said = log.splitlines()
    assert sum("pupils.ips" in s and "cannot read" in s for s in said) >= 1
    assert sum("fail-closed: blocking" in s for s in said) == 1, log
    assert "500 failures" in said[-1]


def test_config_check_and_import_list_the_skipped_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = _tree(tmp_path, b"10.0.0.0/24\nhost 10.0.3.1\n10.0.1.0/33\n")
    ips = tmp_path / "db" / "pupils.ips"
    toml = tmp_path / "gateway.toml"
    toml.write_text(f'[rules]\nsquidguard_conf = "{conf}"\n')
    assert main(["config", "check", str(toml)]) == 0
    out = capsys.readouterr().out
    assert f"skipped: {ips}:3: '10.0.1.0/33': prefix /33 is not 0-32" in out
    assert f"note: {ips}:2: 'host' is not an address" in out
    assert "2 list lines or entries skipped" in out
    assert main(["import", "squidguard", str(conf), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"skipped: {ips}:3: '10.0.1.0/33'" in out
    assert f"note: {ips}:2: 'host' is not an address" in out
