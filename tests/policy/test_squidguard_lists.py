"""Every list file read as the real squidGuard 1.6 reads it: generated variants of iplist,
userlist, ``ip``/``user`` statements, domainlist and urllist files (separators, several
entries a line, comments at line end and glued, case, tabs, CRLF, blank lines,
duplicates, short addresses, networks with host bits, dotted and non-contiguous netmasks,
ranges, ``+``/``-`` prefixes, words ending a line), each decided by squidGuard and by
urlsieve's policy helper for probes at every entry's edges: the client grouping and the
decisions must be equal, apart from the documented classes (:func:`_class`). The lines
squidGuard cannot survive (a line of blanks: it crashes; a bad address: emergency mode)
are asserted as such, and urlsieve's answer to them.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tests.policy.test_squidguard_differential import run_squidguard
from urlsieve.gateway.live import LiveRules
from urlsieve.gateway.policy_helper import PolicyHelper
from urlsieve.gateway.protocol import HelperMode
from urlsieve.gateway.squid import HelperSettings
from urlsieve.policy.build import build_rules
from urlsieve.policy.engine import PolicyEngine
from urlsieve.policy.squidguard import read_squidguard

VARIANTS = 60
WHEN = "2026-05-04 10:00:00"
#: A client in no ip source (user probes come from it).
NOWHERE = "192.168.77.1"
_SEPARATORS = [" ", "\t", ",", ", ", " \t,", "  ", ",,"]
_NAMES = [
    "alice",
    "bob",
    "carol",
    "dave",
    "eve",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "oscar",
    "peggy",
    "trent",
    "victor",
    "walter",
]


def _ip(value: int) -> str:
    return ".".join(str((value >> s) & 255) for s in (24, 16, 8, 0))


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.probes: set[int] = set()

    def probe(self, low: int, high: int) -> None:
        for value in (low - 1, low, high, high + 1, self.rng.randint(low, high)):
            if 0 <= value <= 0xFFFFFFFF:
                self.probes.add(value)

    def ip_entry(self, conf: bool) -> str:
        """One entry in one of squidGuard's forms (``conf``: the ``ip`` statement's lexer
        takes four-part addresses only)."""
        rng = self.rng
        base = (10 << 24) | (rng.randint(0, 3) << 16) | (rng.randint(0, 255) << 8)
        host = base | rng.randint(0, 255)
        forms = ["host", "cidr", "netmask", "range", "netmask-bits", "noncontiguous"]
        if not conf:
            forms += ["short", "dot", "zeros", "glued"]
        form = rng.choice(forms)
        if form == "cidr":
            prefix = rng.randint(16, 32)
            mask = 0xFFFFFFFF ^ (0xFFFFFFFF >> prefix)
            self.probe(host & mask, (host & mask) | (~mask & 0xFFFFFFFF))
            return f"{_ip(host)}/{prefix}"
        if form == "netmask":
            prefix = rng.randint(16, 30)
            mask = 0xFFFFFFFF ^ (0xFFFFFFFF >> prefix)
            self.probe(host & mask, (host & mask) | (~mask & 0xFFFFFFFF))
            return f"{_ip(host & mask)}/{_ip(mask)}"
        if form == "netmask-bits":  # bits outside the mask: no client matches
            self.probe(base, base | 255)
            return f"{_ip(base | rng.randint(1, 255))}/255.255.255.0"
        if form == "noncontiguous":
            mask = 0xFFFF00FF
            self.probe(host & mask, host & mask)
            self.probes.add((host & mask) | 0x4200)
            return f"{_ip(host & mask)}/{_ip(mask)}"
        if form == "range":
            high = host + rng.randint(0, 40)
            self.probe(host, high)
            gap = rng.choice(["-", " - ", "- "]) if conf else "-"
            return f"{_ip(host)}{gap}{_ip(high)}"
        if form == "short":  # 10.N is 10.N.0.0
            second = rng.randint(0, 3)
            self.probe((10 << 24) | (second << 16), (10 << 24) | (second << 16))
            return f"10.{second}"
        if form == "dot":
            self.probe(host, host)
            return f"{_ip(host)}."
        if form == "zeros":
            self.probe(host, host)
            return ".".join(f"{int(p):03d}" for p in _ip(host).split("."))
        if form == "glued":  # cut at the first character outside 0-9./-
            self.probe(host, host)
            return f"{_ip(host)}{rng.choice(['abc', '#x', ':80', ';'])}"
        self.probe(host, host)
        return _ip(host)

    def line(self, entries: list[str]) -> str:
        rng = self.rng
        text = entries[0]
        for entry in entries[1:]:
            text += rng.choice(_SEPARATORS) + entry
        if rng.random() < 0.25:
            text = rng.choice(["", " ", "\t", ","]) + text
        if rng.random() < 0.3:
            text += rng.choice(["", " ", "\t"]) + rng.choice([" # a comment", "\t#10.3.3.3 x"])
        return text

    def iplist(self) -> bytes:
        rng = self.rng
        lines: list[str] = []
        for _ in range(rng.randint(5, 25)):
            roll = rng.random()
            if roll < 0.08:
                lines.append("#" + self.ip_entry(False))  # a '#' line: its entry is not read
            elif roll < 0.12:
                lines.append("")
            elif roll < 0.17 and lines:
                lines.append(rng.choice(lines))  # a duplicate
            elif roll < 0.22:
                word = rng.choice(["host", "lab", "x"])  # a word ends the line
                hidden = self.ip_entry(False)
                lines.append(f"{word} {hidden}")
            else:
                lines.append(self.line([self.ip_entry(False) for _ in range(rng.randint(1, 4))]))
        return self._join(lines)

    def _join(self, lines: list[str]) -> bytes:
        eol = self.rng.choice(["\n", "\r\n", "mixed"])
        out = ""
        for text in lines:
            end = self.rng.choice(["\n", "\r\n"]) if eol == "mixed" else eol
            # An empty CRLF line is a line of blanks to squidGuard's iplist and userlist
            # readers, which crash on it: asserted apart (test_what_squidguard_cannot_read…).
            out += text + ("\n" if not text else end)
        return out.encode()

    def name(self) -> str:
        rng = self.rng
        name = rng.choice(_NAMES)
        return "".join(c.upper() if rng.random() < 0.2 else c for c in name)

    def userlist(self) -> bytes:
        rng = self.rng
        lines: list[str] = []
        for _ in range(rng.randint(3, 12)):
            roll = rng.random()
            if roll < 0.25:
                lines.append(f"{self.name()}:{rng.choice(['x', 'Full Name, Room 2', ''])}")
            elif roll < 0.3:
                lines.append(f" {self.name()}:x")  # the blank stays part of the user
            elif roll < 0.35:
                lines.append(f"{self.name()}#glued")
            elif roll < 0.4:
                lines.append(f"SCHOOL\\{self.name()}")
            elif roll < 0.45:
                lines.append("#" + self.name())
            elif roll < 0.5:
                lines.append("")
            else:
                lines.append(self.line([self.name() for _ in range(rng.randint(1, 4))]))
        return self._join(lines)


def _conf(root: Path, gen: _Gen) -> Path:
    rng = gen.rng
    db = root / "db"
    db.mkdir(parents=True)
    (db / "dummy").write_text("dummy.test\n")
    (db / "ips").write_bytes(gen.iplist())
    (db / "users").write_bytes(gen.userlist())
    # squidGuard 1.6 cannot read a comma right after a network ("/24,": a syntax error).
    ip_statement = rng.choice([" ", " , ", " ,"]).join(
        gen.ip_entry(True) for _ in range(rng.randint(1, 4))
    )
    user_statement = " ".join(
        gen.name() + rng.choice(["", ","]) for _ in range(rng.randint(1, 3))
    ).rstrip(",")
    conf = root / "squidGuard.conf"
    conf.write_text(
        f"dbhome {db}\nlogdir {root}\n"
        "dest dummy {\n domainlist dummy\n}\n"
        "src ipfile {\n iplist ips\n}\n"
        f"src ipconf {{\n ip {ip_statement}\n}}\n"
        "src userfile {\n userlist users\n}\n"
        f"src userconf {{\n user {user_statement}\n}}\n"
        "acl {\n"
        + "".join(
            f" {name} {{\n pass none\n redirect http://g.test/{name}\n }}\n"
            for name in ("ipfile", "ipconf", "userfile", "userconf")
        )
        + " default {\n pass all\n }\n}\n"
    )
    return conf


def _ours(conf: Path, lines: list[str]) -> list[str]:
    read = read_squidguard(conf)
    rules = build_rules(read.policy)
    engine = PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)
    helper = PolicyHelper(
        LiveRules(lambda: engine),
        HelperSettings(mode=HelperMode.REWRITE, redirect_url="http://unused.test/", channels=False),
    )
    return [r.rstrip("\n") for r in helper.handle_batch([ln.encode() for ln in lines])]


def _probe_lines(gen: _Gen) -> list[str]:
    lines = [f"http://site.test/ {_ip(v)}/- - GET" for v in sorted(gen.probes)]
    for name in _NAMES:
        for user in (name, name.upper(), name.capitalize(), f"{name}#glued", f"school\\{name}"):
            lines.append(f"http://site.test/ {NOWHERE}/- {user} GET")
    return lines


@pytest.mark.parametrize("seed", range(VARIANTS))
def test_client_grouping_equals_squidguard(tmp_path: Path, seed: int) -> None:
    gen = _Gen(seed)
    conf = _conf(tmp_path, gen)
    lines = _probe_lines(gen)
    theirs = run_squidguard(conf, lines, WHEN)
    ours = _ours(conf, lines)
    assert len(theirs) == len(ours) == len(lines)
    assert any(r != "ERR" for r in theirs)
    different = [
        f"{line}\n  urlsieve:   {a}\n  squidGuard: {b}"
        for line, a, b in zip(lines, ours, theirs, strict=True)
        if a != b
    ]
    files = "".join(
        f"--- {p.name}\n{p.read_bytes().decode()!r}\n" for p in sorted((tmp_path / "db").iterdir())
    )
    assert not different, (
        f"{len(different)} differences:\n"
        + "\n".join(different[:20])
        + ("\n" + conf.read_text() + files)
    )
    agreement.append((len(lines), len(lines) - len(different)))


agreement: list[tuple[int, int]] = []


# -- domainlist and urllist ----------------------------------------------------------------


def _dest_lists(gen: _Gen) -> tuple[bytes, bytes, list[str]]:
    """A domainlist and a urllist in squidGuard's forms, and the URLs to probe."""
    rng = gen.rng
    domains: list[str] = []
    urls: list[str] = []
    probes: list[str] = []
    for k in range(rng.randint(6, 20)):
        host = f"site{k}-{rng.randint(0, 999)}.test"
        spelled = "".join(c.upper() if rng.random() < 0.2 else c for c in host)
        form = rng.random()
        if form < 0.1:
            line = "+" + spelled
        elif form < 0.2:
            line = "-" + spelled
        elif form < 0.3:
            line = rng.choice([" ", "\t", "  "]) + spelled
        elif form < 0.4:
            line = spelled + rng.choice([" ", "\t", " \t"])
        elif form < 0.5:
            line = spelled + " # a comment"  # squidGuard: a redirect page "# a comment"
        elif form < 0.55:
            line = "#" + spelled
        else:
            line = spelled
        domains.append(line)
        probes += [f"http://{host}/", f"http://www.{host}/x", f"http://other-{host}/"]
        if rng.random() < 0.2:
            domains.append(rng.choice(["", "# note", line]))
    for k in range(rng.randint(3, 10)):
        host = f"path{k}.test"
        path = f"/dir{rng.randint(0, 9)}/"
        spelled = host + path
        line = rng.choice(["", "+", "-", " "]) + spelled + rng.choice(["", " ", "\t"])
        urls.append(line)
        probes += [f"http://{host}{path}", f"http://{host}{path}page", f"http://{host}/other"]
    return gen._join(domains), gen._join(urls), probes


@pytest.mark.parametrize("seed", range(VARIANTS))
def test_dest_lists_equal_squidguard(tmp_path: Path, seed: int) -> None:
    gen = _Gen(1000 + seed)
    domains, urls, probes = _dest_lists(gen)
    db = tmp_path / "db"
    db.mkdir()
    (db / "domains").write_bytes(domains)
    (db / "urls").write_bytes(urls)
    conf = tmp_path / "squidGuard.conf"
    conf.write_text(
        f"dbhome {db}\nlogdir {tmp_path}\n"
        "dest bad {\n domainlist domains\n urllist urls\n}\n"
        "acl {\n default {\n pass !bad all\n redirect http://g.test/bad\n }\n}\n"
    )
    lines = [f"{url} 10.0.0.1/- - GET" for url in probes]
    theirs = run_squidguard(conf, lines, WHEN)
    ours = _ours(conf, lines)
    different = []
    for line, a, b in zip(lines, ours, theirs, strict=True):
        # entry-redirect: the rest of a domainlist line is that entry's page for squidGuard
        # ("# a comment" here); urlsieve blocks with the ACL's page (README, deviations).
        if a == b or (a.startswith("OK ") and b == 'OK rewrite-url="# a comment"'):
            continue
        different.append(f"{line}\n  urlsieve:   {a}\n  squidGuard: {b}")
    assert not different, "\n".join(different[:20]) + "\n" + domains.decode() + urls.decode()
    agreement.append((len(lines), len(lines) - len(different)))


# -- what squidGuard cannot survive ------------------------------------------------------


@pytest.mark.parametrize(
    ("iplist", "squidguard"),
    [
        (b"10.0.0.1\n   \n", "crash"),
        (b"10.0.0.1\r\n\r\n10.0.0.2\r\n", "crash"),
        (b"10.0.0.1\n10.0.0.0/33\n", "emergency"),
        (b"10.0.0.9-10.0.0.1\n10.0.0.1\n", "emergency"),
        (b"10.0.0.1\n10.0.0.256\n", "emergency"),
    ],
)
def test_what_squidguard_cannot_read_urlsieve_skips(
    tmp_path: Path, iplist: bytes, squidguard: str
) -> None:
    db = tmp_path / "db"
    db.mkdir()
    (db / "ips").write_bytes(iplist)
    (db / "dummy").write_text("dummy.test\n")
    conf = tmp_path / "squidGuard.conf"
    conf.write_text(
        f"dbhome {db}\nlogdir {tmp_path}\n"
        "dest dummy {\n domainlist dummy\n}\n"
        "src pupils {\n iplist ips\n}\n"
        "acl {\n pupils {\n pass none\n redirect http://g.test/pupils\n }\n"
        " default {\n pass all\n }\n}\n"
    )
    lines = ["http://site.test/ 10.0.0.1/- - GET", "http://site.test/ 10.0.0.5/- - GET"]
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_squidguard(conf, lines, WHEN)
    if squidguard == "crash":
        assert not failed.value.stdout  # it died reading the list (SIGSEGV), answering nothing
    else:  # emergency mode: every request passes, then exit(-1)
        assert failed.value.stdout.decode().splitlines() == ["ERR", "ERR"]
    read = read_squidguard(conf)
    assert len(read.policy.skipped) == 1
    assert _ours(conf, lines) == ['OK rewrite-url="http://g.test/pupils"', "ERR"]


def test_agreement_figures() -> None:
    """Run after the variants: the probes compared, for the report."""
    if not agreement:
        pytest.skip("run with the variant tests")
    total = sum(n for n, _ in agreement)
    equal = sum(e for _, e in agreement)
    print(f"squidGuard list variants: {equal}/{total} replies equal")
    assert equal == total
