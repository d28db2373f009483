"""iplist, userlist and ``ip`` entries read as squidGuard 1.6's readers read them (its
``sg.y``: ``sgSourceIpList``, ``sgSourceUserList``, ``sgConvDot``, ``sgSetIpType``); each
case here was also checked against the real binary (see test_squidguard_lists.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlsieve.policy.clients import AddressSet
from urlsieve.policy.lists import read_ip_statement, read_iplist, read_userlist


def _iplist(tmp_path: Path, data: bytes) -> tuple[AddressSet, list[str], list[str]]:
    path = tmp_path / "ips"
    path.write_bytes(data)
    read = read_iplist(str(path))
    return AddressSet.of(read.addresses, read.masked), read.skipped, read.notes


@pytest.mark.parametrize(
    ("data", "inside", "outside"),
    [
        # several entries a line, separated by blanks, tabs and commas
        (b"10.0.0.2 10.0.0.3,10.0.0.4\t10.0.0.5\n", ["10.0.0.2", "10.0.0.4", "10.0.0.5"], []),
        # a comment after a blank ends the line; glued to an entry it is cut off
        (b"10.0.0.5 # 10.0.0.6\n10.0.0.7#x\n", ["10.0.0.5", "10.0.0.7"], ["10.0.0.6"]),
        # a network with host bits is masked (squidGuard), not refused
        (b"10.0.1.5/24\n", ["10.0.1.9", "10.0.1.0"], ["10.0.2.1"]),
        # a word ends the line, even after an address
        (b"host 10.0.2.1\n10.0.3.1 host 10.0.3.2\r\n", ["10.0.3.1"], ["10.0.2.1", "10.0.3.2"]),
        # short addresses, trailing dot, leading zeros
        (b"10.1\n10.0.7.1.\n010.0.8.001\n", ["10.1.0.0", "10.0.7.1", "10.0.8.1"], ["10.1.0.1"]),
        # a dotted netmask is not applied to the address
        (b"10.0.4.0/255.255.255.0\n10.0.5.1/255.255.255.0\n", ["10.0.4.9"], ["10.0.5.1"]),
        # a non-contiguous netmask
        (b"10.0.0.7/255.0.0.255\n", ["10.9.9.7", "10.0.0.7"], ["10.0.0.8", "11.0.0.7"]),
        # ranges, both ends included; trailing garbage cut
        (b"10.2.0.1-10.2.0.3xyz\n", ["10.2.0.1", "10.2.0.3"], ["10.2.0.4"]),
        # a line starting with # and CRLF endings
        (b"#10.3.0.1\r\n10.3.0.2\r\n", ["10.3.0.2"], ["10.3.0.1"]),
        # '/' with nothing after it is /0: every address (as squidGuard reads it)
        (b"10.4.0.0/\n", ["192.0.2.1"], []),
        # IPv6 (urlsieve's own reading)
        (b"2001:db8::/32\n", ["2001:db8::1"], ["2001:db9::1"]),
    ],
)
def test_iplist_grammar(tmp_path: Path, data: bytes, inside: list[str], outside: list[str]) -> None:
    addresses, skipped, _notes = _iplist(tmp_path, data)
    assert not skipped
    for address in inside:
        assert address in addresses, address
    for address in outside:
        assert address not in addresses, address


@pytest.mark.parametrize(
    ("data", "line", "reason"),
    [
        (b"10.0.0.1\n10.0.0.0/33\n10.0.0.9\n", 2, "prefix /33 is not 0-32"),
        (b"10.0.0.1\n10.0.0.9-10.0.0.1\n", 2, "ends before it starts"),
        (b"10.0.0.1\n10.0.0.300\n", 2, "not an address"),
        (b"10.0.0.1\n   \n", 2, "blanks or commas only"),
        (b"10.0.0.1\r\n\t ,\r\n", 2, "blanks or commas only"),
        (b"10.0.0.1\n1.2.3.4.5\n", 2, "not an address"),
        (b"10.0.0.1\n10.0.0.0/255.0.300.0\n", 2, "not a netmask"),
    ],
)
def test_iplist_bad_entries_are_skipped_and_the_rest_loads(
    tmp_path: Path, data: bytes, line: int, reason: str
) -> None:
    addresses, skipped, _notes = _iplist(tmp_path, data)
    assert "10.0.0.1" in addresses
    assert len(skipped) == 1
    assert skipped[0].startswith(f"{tmp_path / 'ips'}:{line}: ")
    assert reason in skipped[0]


def test_a_long_line_is_read_in_squidguards_pieces(tmp_path: Path) -> None:
    # fgets(4096): the 4,095th byte ends a piece; the next piece is read as a new line.
    head = b"10.9.0.1 " + b" " * (4095 - 9 - 8) + b"10.9.0.2" + b"10.9.0.3\n"
    addresses, skipped, _notes = _iplist(tmp_path, head)
    assert not skipped
    assert "10.9.0.1" in addresses and "10.9.0.2" in addresses and "10.9.0.3" in addresses


def _userlist(tmp_path: Path, data: bytes) -> tuple[set[str], list[str], list[str]]:
    path = tmp_path / "users"
    path.write_bytes(data)
    read = read_userlist(str(path))
    return read.users, read.skipped, read.notes


def test_userlist_grammar(tmp_path: Path) -> None:
    users, skipped, notes = _userlist(
        tmp_path,
        b"Alice\n bob:x\ncarol:Carol Smith, room 2\ndave eve,frank # grace\n"
        b"heidi#x\r\nivan\r\n#judy\nkim judy:x\nSCHOOL\\Mallory\n\nnina\r",
    )
    assert users == {
        "alice",
        " bob",  # squidGuard keeps the blank before a 'user:' line's name
        "carol",
        "dave",
        "eve",
        "frank",
        "heidi#x",
        "ivan",
        "kim",
        "judy:x",  # only the first token's ':' starts a comment
        "school\\mallory",
        "nina\r",  # the last line has no newline: its \r stays (as in squidGuard)
    }
    assert not skipped
    assert any("' bob'" in n for n in notes) and any("'heidi#x'" in n for n in notes)


def test_userlist_blank_lines_are_skipped_and_said(tmp_path: Path) -> None:
    users, skipped, _notes = _userlist(tmp_path, b"alice\n \t\nbob\n")
    assert users == {"alice", "bob"}
    assert skipped == [f"{tmp_path / 'users'}:2: " + skipped[0].split(": ", 1)[1]]


@pytest.mark.parametrize(
    ("text", "inside", "outside", "skipped"),
    [
        ("10.0.0.1, 10.0.0.2", ["10.0.0.1", "10.0.0.2"], [], 0),
        ("10.0.0.0 /24 10.1.0.1 - 10.1.0.3", ["10.0.0.9", "10.1.0.2"], ["10.1.0.4"], 0),
        ("10.0.0.5/255.255.255.0", [], ["10.0.0.5"], 0),
        ("10.0.0.1 host 10.0.0.2", ["10.0.0.1", "10.0.0.2"], [], 1),
        ("2001:db8::1", ["2001:db8::1"], [], 0),
        ("10.0.0.0/40 10.0.0.3", ["10.0.0.3"], [], 1),
    ],
)
def test_ip_statement(text: str, inside: list[str], outside: list[str], skipped: int) -> None:
    read = read_ip_statement("conf:3", text)
    addresses = AddressSet.of(read.addresses, read.masked)
    assert len(read.skipped) == skipped
    assert all(s.startswith("conf:3: ") for s in read.skipped)
    for address in inside:
        assert address in addresses, address
    for address in outside:
        assert address not in addresses, address


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_any_bytes_read_or_skip_never_raise(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    root = tmp_path_factory.mktemp("any")
    for name, reader in (("ips", read_iplist), ("users", read_userlist)):
        path = root / name
        path.write_bytes(data)
        read = reader(str(path))
        AddressSet.of(read.addresses, read.masked)
    read_ip_statement("conf:1", data.decode("utf-8", "replace"))


def test_dest_lists_follow_squidguard_and_note_each_deviation(tmp_path: Path) -> None:
    from urlsieve.policy.build import build_rules
    from urlsieve.policy.model import Dest, Policy

    domains = tmp_path / "domains"
    domains.write_bytes(
        b"+plus.test\n-minus.test\nfirst.test second.test\n.dot.test\n*.star.test\n"
        b"kept.test # a comment\n"
    )
    urls = tmp_path / "urls"
    urls.write_bytes(b"-u.test/dir/ page.html\n")
    policy = Policy(dests={"bad": Dest("bad", str(domains), str(urls))})
    rules = build_rules(policy)
    assert not rules.warnings
    for url in (
        "http://plus.test/",
        "http://minus.test/",
        "http://first.test/",
        "http://u.test/dir/",
    ):
        assert rules.filter.check(url).blocked, url
    assert not rules.filter.check("http://second.test/").blocked
    where = [note.split(": ", 1)[0] for note in rules.notes]
    assert where == [f"{domains}:3", f"{domains}:4", f"{domains}:5", f"{urls}:1"]


def test_what_squidguard_16_cannot_parse_is_read_as_meant_and_noted(tmp_path: Path) -> None:
    from urlsieve.policy.squidguard import read_squidguard

    conf = tmp_path / "squidGuard.conf"
    conf.write_text(
        "rew r {\n s@/old@/new@\n s@(/a)@/b@\n}\n"
        "src kids {\n ip 10.0.0.0/24, 10.1.0.1\n user carol, bob\n}\n"
        "acl {\n default {\n pass all\n rewrite r\n }\n}\n"
    )
    read = read_squidguard(conf)
    said = " ".join(read.notes + read.policy.notes)
    assert f"{conf}:2: '@/old@/new@'" in said.replace("'s@", "'@")
    assert "(/a)" not in said
    assert f"{conf}:6: '10.0.0.0/24,'" in said
    assert f"{conf}:7: user 'carol,'" in said
    kids = read.policy.sources[0]
    assert kids.addresses is not None and "10.1.0.1" in kids.addresses
    assert kids.users == frozenset({"carol,", "bob"})


def test_expressionlist_blanks_are_noted(tmp_path: Path) -> None:
    from urlsieve.policy.build import build_rules
    from urlsieve.policy.model import Dest, Policy

    expressions = tmp_path / "expressions"
    expressions.write_bytes(b"casino\n  poker\n# a comment\nslots \r\n")
    rules = build_rules(Policy(dests={"games": Dest("games", expressionlist=str(expressions))}))
    assert [n.split(": ", 1)[0] for n in rules.notes] == [f"{expressions}:2", f"{expressions}:4"]
    assert rules.expressions.matches("games", "http://x.test/poker")
