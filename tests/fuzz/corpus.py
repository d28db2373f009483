"""The seed corpus: hostile byte lines of every class of issue 9, by class.

Each entry is ``(class, bytes)``: one line as a client or Squid would send it (no
newline). The sizes are big enough to cross any sensible cap (a URL over 64 KiB, a
number of 5,000 digits, a host of 5,000 labels) and small enough that the harness
stays bounded even on code that is still quadratic: linearity itself is shown by
``benchmarks/adversarial.py``, never by a timed assert.

:mod:`tests.fuzz.policy` holds the rules these URLs are checked against
(``bad.org`` blocked, ``ads.example/ads`` blocked, ``latin.example/caf%E9``
blocked, ``10.9.8.7`` blocked, ``bad.org/public/`` allowed).
"""

from __future__ import annotations

#: Unicode spaces and line separators Squid forwards as raw UTF-8 inside a URL.
UNICODE_SPACES = tuple(
    chr(c).encode()
    for c in (
        0x00A0,
        0x0085,
        0x1680,
        *range(0x2000, 0x200B),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
        0xFEFF,
    )
)

DIGITS_5000 = b"9" * 5000

_FIELDS = b" 10.0.0.7/pc7.lan - GET myip=10.0.0.1 myport=3128"

SEEDS: tuple[tuple[str, bytes], ...] = (
    # 1. bytes that are not UTF-8, in the URL and in the user field (%i on the block page)
    ("non-utf8-url", b"http://bad.org/\xff"),
    ("non-utf8-url", b"http://bad.org/\xff" + _FIELDS),
    ("non-utf8-url", b"http://latin.example/caf\xe9/menu"),
    ("non-utf8-url", b"http://\xff\xfe.example/"),
    ("non-utf8-url", b"http://ads.example/\xc0\xaf../ads"),  # over-long UTF-8 for '/'
    ("non-utf8-url", b"http://ads.example/\xed\xa0\x80/x"),  # an encoded surrogate
    ("non-utf8-url", b"\xff\xfe\xfd"),
    ("non-utf8-user", b"http://bad.org/ 10.0.0.7/pc7.lan j\xe9r\xf4me GET"),
    ("non-utf8-user", b"http://bad.org/ 10.0.0.7/p\xe9c.lan \xff GET"),
    ("non-utf8-user", b"http://bad.org/ \xff/\xfe \xfd \xfc k\xff=v\xfe"),
    # 2. %23 and %3F in paths (ACL mode decoded before splitting)
    ("pct-23-3f", b"http://bad.org/x%23/../ads"),
    ("pct-23-3f", b"http://ads.example/x%23/../ads"),
    ("pct-23-3f", b"http://ads.example/x%3F/../ads"),
    ("pct-23-3f", b"http://ads.example/x%3f/../ads/b.gif"),
    ("pct-23-3f", b"http://ads.example/x%2523/../ads"),
    ("pct-23-3f", b"http://ads.example/%23%3F%23/../ads"),
    # 3. Unicode spaces inside URLs
    *(("unicode-space", b"http://ads.example/" + sp + b"/../ads") for sp in UNICODE_SPACES),
    *(
        ("unicode-space", b"http://ads.example/x" + sp + b"y/../../ads")
        for sp in UNICODE_SPACES[:3]
    ),
    # 4. '//' before '..'
    ("dot-slash", b"http://ads.example/ads//../x"),
    ("dot-slash", b"http://ads.example//..//ads"),
    ("dot-slash", b"http://ads.example/x//../../ads"),
    ("dot-slash", b"http://ads.example/a/b/../..//ads"),
    ("dot-slash", b"http://ads.example/%2e%2e/%2E./.%2e/ads"),
    ("dot-slash", b"http://ads.example/" + b"x/../" * 2000 + b"ads"),
    # 5. Latin-1 paths
    ("latin1-path", b"http://latin.example/caf\xe9"),
    ("latin1-path", b"http://latin.example/caf%E9/"),
    ("latin1-path", b"http://latin.example/caf%e9/x"),
    ("latin1-path", b"http://latin.example/caf%25E9/x"),
    ("latin1-path", b"http://latin.example/x/../caf\xe9/"),
    # 9. numbers of 5,000 digits (int() refuses over 4,300)
    ("long-number", b"http://bad.org:" + DIGITS_5000 + b"/"),
    ("long-number", b"http://1." + DIGITS_5000 + b"/"),
    ("long-number", b"http://" + DIGITS_5000 + b"/"),
    ("long-number", b"http://0x" + b"f" * 5000 + b"/"),
    ("long-number", b"http://0" + b"7" * 5000 + b".1.2.3/"),
    ("long-number", b"http://[::" + DIGITS_5000 + b"]/"),
    ("long-number", b"http://[::ffff:1." + DIGITS_5000 + b"]/"),
    ("long-number", b"evil.com:" + DIGITS_5000),  # a CONNECT authority
    ("long-number", b"http://good.org/?id=" + DIGITS_5000),
    # 8. hosts of many labels, '%25' chains, long 'a:a:a' lines, over-long lines
    ("many-labels", b"http://" + b"a." * 5000 + b"bad.org/"),
    ("many-labels", b"http://" + b"a." * 5000 + b"good.org/"),
    ("many-labels", b"http://" + b"." * 10000 + b"bad.org/"),
    ("pct-25-chain", b"http://ads.example/%" + b"25" * 3000 + b"61ds"),
    ("pct-25-chain", b"http://bad.org/" + b"%25" * 5000),
    ("pct-25-chain", b"http://%" + b"25" * 2000 + b"62ad.org/"),
    ("colon-line", b"a:" * 6000),
    ("colon-line", b"0:" * 6000 + b" x"),
    ("colon-line", b"http://" + b"a:" * 6000),
    ("over-long", b"http://ads.example/ads/" + b"a" * 200_000),
    ("over-long", b"http://good.org/" + b"a" * 200_000),
    ("over-long", b"http://" + b"a" * 100_000 + b".org/"),
    # control bytes: NUL, CR, LF inside the line, TAB
    ("nul-cr", b"http://ads.example/\x00ads"),
    ("nul-cr", b"http://ads.example/a\rb/../../ads"),
    ("nul-cr", b"http://ads.example/ads\r"),
    ("nul-cr", b"\x00"),
    ("nul-cr", b"\r"),
    ("nul-cr", b"http://bad.org\x00.good.org/"),
    ("nul-cr", b"http://ads.example/a\t/../ads"),
    ("nul-cr", b"\thttp://bad.org/"),
    # empty and blank lines, lone channel IDs
    ("blank", b""),
    ("blank", b" "),
    ("blank", b"   \t  "),
    ("blank", b"\xe3\x80\x80"),
    ("lone-channel", b"0"),
    ("lone-channel", b"7 "),
    ("lone-channel", b"12  "),
    ("lone-channel", b"99999999999999999999999"),
    # request lines Squid sends, and near misses
    ("squid-line", b"0 http://bad.org/" + _FIELDS),
    ("squid-line", b"1 bad.org:443 10.0.0.7/- - CONNECT"),
    ("squid-line", b"2 [::ffff:10.9.8.7]:443 10.0.0.7/- - CONNECT"),
    ("squid-line", b"http://good.org/ http://bad.org/"),
    ("squid-line", b"3  http://bad.org/   10.0.0.7  -  GET"),
    ("squid-line", b"http://bad.org/ - - - - - - - - - - - - -"),
    ("squid-line", b"http://bad.org/ a=b c=d =e f= %=%"),
    ("squid-line", b"http://bad.org/ 10.0.0.7/" + b"n" * 70_000),
    ("squid-line", b"4 - 10.0.0.7 - GET"),
    ("squid-line", b"5 javascript:alert(1)"),
    ("squid-line", b"http://user:p%40ss@bad.org@good.org/"),
    ("squid-line", b"http://good.org@bad.org/"),
    ("squid-line", b"http://bad.org\\@good.org/"),
    # repeated query parameters, and query parameters that look like URLs
    ("repeated-query", b"http://good.org/?url=http://bad.org/&url=http://bad.org/"),
    ("repeated-query", b"http://good.org/?" + b"a=1&" * 5000),
    # deeply nested JSON (as a line: the service reads it as a body)
    ("nested-json", b"[" * 100_000),
    ("nested-json", b'{"urls":' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    ("nested-json", b'{"urls": ["\\udcff", "http://bad.org/"]}'),
    ("nested-json", b'{"urls": ["http://bad.org/"], "op": "add", "op": "test"}'),
    ("nested-json", b'{"urls": [' + b'"http://a.org/",' * 2000 + b'"x"]}'),
    ("nested-json", b'{"urls": 1e99999}'),
)

#: Substrings that make mutated seeds interesting (inserted at random places).
TOKENS: tuple[bytes, ...] = (
    b"%",
    b"%23",
    b"%3F",
    b"%25",
    b"%2e",
    b"%2F",
    b"%00",
    b"%ff",
    b"//",
    b"/../",
    b"/./",
    b"..",
    b"@",
    b":",
    b"::",
    b"[",
    b"]",
    b"\\",
    b"?",
    b"#",
    b"=",
    b" ",
    b"\t",
    b"\r",
    b"\x00",
    b"\xff",
    b"\xe9",
    b"\xc3",
    b"0x",
    b"9" * 40,
    b"xn--",
    b"\xef\xbc\x8e",  # FULLWIDTH FULL STOP
    b"\xe3\x80\x82",  # IDEOGRAPHIC FULL STOP
    b"\xe2\x80\x8b",  # ZERO WIDTH SPACE
    *UNICODE_SPACES[::4],
)


def seeds(*classes: str) -> list[bytes]:
    """The seed lines of the given classes (all of them when none is given)."""
    return [line for cls, line in SEEDS if not classes or cls in classes]


def seed_ids() -> list[str]:
    """A test id per seed: its class and its index."""
    return [f"{cls}-{index}" for index, (cls, _) in enumerate(SEEDS)]
