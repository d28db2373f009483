"""Hypothesis strategies over bytes: arbitrary lines, mutated seeds, bypass spellings.

A *bypass spelling* is a URL that every browser and origin server reads as a blocked
resource (:mod:`tests.fuzz.policy`), written the way an attacker would: characters
percent-encoded (also twice, ``%2561``), case changed, ``//``, ``/./`` and
``junk/../`` inserted (the junk may hold ``%23``, ``%3F``, Unicode spaces and raw
bytes), trailing dots, user info, ports, every IPv4 spelling, full-width letters and
raw bytes that are not UTF-8.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz.corpus import SEEDS, TOKENS, UNICODE_SPACES

# -- arbitrary and mutated lines --------------------------------------------------------


def _without_newline(data: bytes) -> bytes:
    return data.replace(b"\n", b"")


#: Any bytes but a newline: one request line.
arbitrary_lines = st.binary(max_size=300).map(_without_newline)


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A seed line with a few random edits (insert a token or a byte, cut, repeat, flip)."""
    line = bytearray(draw(st.sampled_from(SEEDS))[1][:4096])
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(line)))
        edit = draw(st.sampled_from(("token", "byte", "cut", "repeat", "case")))
        if edit == "token":
            line[at:at] = draw(st.sampled_from(TOKENS))
        elif edit == "byte":
            line[at:at] = bytes([draw(st.integers(0, 255))])
        elif edit == "cut":
            del line[at : at + draw(st.integers(1, 16))]
        elif edit == "repeat":
            line[at:at] = line[at : at + draw(st.integers(1, 8))] * draw(st.integers(2, 50))
        else:
            line[at : at + 1] = line[at : at + 1].swapcase()
    return _without_newline(bytes(line))


#: What every driver is fed: arbitrary bytes, mutated seeds, and the seeds themselves.
hostile_lines = st.one_of(arbitrary_lines, mutated_lines(), st.sampled_from([s for _, s in SEEDS]))


# -- bypass spellings -------------------------------------------------------------------


def _pct(byte: int, upper: bool) -> bytes:
    return (b"%%%02X" if upper else b"%%%02x") % byte


def _fullwidth(byte: int) -> bytes | None:
    """The full-width form of an ASCII letter or digit (UTS-46 maps it back)."""
    if 0x21 <= byte <= 0x7E and chr(byte).isalnum():
        return chr(byte - 0x21 + 0xFF01).encode()
    return None


@st.composite
def _spell_byte(draw: st.DrawFn, byte: int, *, host: bool) -> bytes:
    """One byte of a host or a path, spelled one of the equivalent ways."""
    choices = ["plain", "pct", "pct25"]
    if host and chr(byte).isalpha():
        choices.append("case")
    if host and _fullwidth(byte) is not None:
        choices.append("fullwidth")
    choice = draw(st.sampled_from(choices))
    if choice == "pct":
        return _pct(byte, draw(st.booleans()))
    if choice == "pct25":  # percent-encoded, then its '%' encoded again (and again)
        return b"%" + b"25" * draw(st.integers(1, 3)) + _pct(byte, draw(st.booleans()))[1:]
    if choice == "case":
        return bytes([byte]).swapcase()
    if choice == "fullwidth":
        return _fullwidth(byte) or bytes([byte])
    return bytes([byte])


@st.composite
def _spell(draw: st.DrawFn, text: bytes, *, host: bool, rate: float = 0.3) -> bytes:
    out = bytearray()
    for byte in text:
        if draw(st.floats(0, 1)) < rate:
            out += draw(_spell_byte(byte, host=host))
        else:
            out.append(byte)
    return bytes(out)


#: Junk for a ``junk/../`` insertion: never empty, never '.' or '..', no '/', '%' or space
#: of its own (the tokens bring the escapes that matter).
_JUNK_TOKENS = (
    b"x",
    b"A",
    b"%23",
    b"%3F",
    b"%3f",
    b"%20",
    b"%2523",
    b"\xff",
    b"\xe9",
    b"\xc3\xa9",
    b"a;b=c",
    b"...",
    *UNICODE_SPACES,
)


@st.composite
def _separator(draw: st.DrawFn) -> bytes:
    """A '/' between two path segments, with insertions that resolve back to one '/'."""
    parts = [b"/"]
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(("slash", "dot", "junk", "dotslash")))
        if kind == "slash":
            parts.append(b"/")
        elif kind == "dot":
            parts.append(draw(st.sampled_from((b"./", b"%2e/", b"%2E%2f"))))
        elif kind == "dotslash":
            parts.append(b"/./")
        else:
            junk = b"".join(draw(st.lists(st.sampled_from(_JUNK_TOKENS), min_size=1, max_size=3)))
            parts.append(junk + draw(st.sampled_from((b"/../", b"/%2e%2e/", b"/.%2E/"))))
    return b"".join(parts)


@st.composite
def _path(draw: st.DrawFn, segments: list[bytes]) -> bytes:
    out = b""
    for segment in segments:
        out += draw(_separator()) + draw(_spell(segment, host=False))
    return out or draw(_separator())


#: Every spelling of 10.9.8.7 an address parser reads as that address.
IPV4_SPELLINGS = (
    b"10.9.8.7",
    b"168364039",
    b"0xa090807",
    b"0XA090807",
    b"0xa.0x9.0x8.0x7",
    b"012.011.010.07",
    b"0012.9.8.7",
    b"10.9.2055",
    b"10.591879",
    b"0xa.9.0x807",
    b"10.9.8.7.",
    b"[::ffff:10.9.8.7]",
    b"[::ffff:a09:807]",
    b"[0:0:0:0:0:ffff:10.9.8.7]",
)

_SCHEMES = (b"http://", b"HTTP://", b"hTtP://", b"https://", b"http:\\\\", b"http:/", b"")
_USERINFO = (b"", b"user@", b"user:pw@", b"good.org@", b"a%40b:c@", b"good.org:80@")
_PORTS = (b"", b":80", b":8080", b":443", b":0080", b":")
_BLOCKED_HOSTS = (b"bad.org", b"www.bad.org", b"x.y.bad.org")
_DOTS = (b".", b"%2e", b"%2E", b"\xe3\x80\x82", b"\xef\xbc\x8e")  # ., 。, ．


@st.composite
def _host(draw: st.DrawFn, name: bytes) -> bytes:
    labels = [draw(_spell(label, host=True)) for label in name.split(b".")]
    out = labels[0]
    for label in labels[1:]:
        out += draw(st.sampled_from(_DOTS)) + label
    if draw(st.booleans()):
        out += b"."
    return out


@st.composite
def _blocked_target(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A blocked host (spelled) and the path segments that make the URL blocked."""
    tail = draw(st.lists(st.sampled_from((b"x", b"b.gif", b"public", b"%2F", b"a b")), max_size=2))
    kind = draw(st.sampled_from(("host", "path", "latin1", "ip")))
    if kind == "host":
        name = draw(st.sampled_from(_BLOCKED_HOSTS))
        # Not under the allow exception bad.org/public/ (a leading 'public' is left out).
        segments = [b"p", *tail] if tail[:1] == [b"public"] else tail
        return draw(_host(name)), segments
    if kind == "path":
        return draw(_host(b"ads.example")), [b"ads", *tail]
    if kind == "latin1":
        cafe = draw(st.sampled_from((b"caf\xe9", b"caf%E9", b"caf%e9", b"caf%25E9")))
        return draw(_host(b"latin.example")), [cafe, *tail]
    return draw(st.sampled_from(IPV4_SPELLINGS)), tail


@st.composite
def blocked_spellings(draw: st.DrawFn) -> bytes:
    """A URL the rules block, spelled to slip past a filter that reads it naively."""
    host, segments = draw(_blocked_target())
    scheme = draw(st.sampled_from(_SCHEMES))
    # Without a scheme, 'user:pw@host' is a URL of scheme 'user': no browser reads it as host.
    userinfo = draw(st.sampled_from(_USERINFO)) if scheme else b""
    url = scheme + userinfo + host + draw(st.sampled_from(_PORTS)) + draw(_path(segments))
    if draw(st.booleans()):
        url += draw(st.sampled_from((b"?", b"?q=1", b"?u=http://good.org/", b"?a=%23&a=%3F")))
    if draw(st.booleans()):
        url += draw(st.sampled_from((b"#", b"#/../../x", b"#%2F..%2F")))
    return url


#: Bytes Squid escapes in external ACL fields (``rfc1738_escape``: unsafe and reserved
#: for its own syntax, controls, space and non-ASCII).
_SQUID_UNSAFE = frozenset(b"%<>\"#{}|\\^~[]`' ")


def squid_escape(url: bytes) -> bytes:
    """``url`` as Squid sends a ``%>ru`` field to an external ACL helper."""
    return b"".join(
        b"%%%02X" % byte if byte <= 0x20 or byte >= 0x7F or byte in _SQUID_UNSAFE else bytes([byte])
        for byte in url
    )
