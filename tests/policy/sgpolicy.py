"""A squidGuard policy with every construct, its lists, and requests from every source
and its edges: shared by the differential test against squidGuard and the TOML test."""

from __future__ import annotations

import random
from pathlib import Path

#: Destinations: domains and urls of each (made-up names under .test/.example).
DESTS = {
    "porn": (
        ["porn.example", "xxx.test", "adult.example.org"],
        ["example.net/porn", "www.mixed.test/adult"],
    ),
    "games": (["games.example", "play.test"], ["example.net/games/"]),
    "social": (["social.example", "chat.test"], []),
    "ads": (["ads.example", "tracker.test"], ["example.net/ads"]),
    "good": (["school.example", "wiki.test"], ["example.net/games/edu"]),
    "warez": (["warez.example"], []),
    "news": (["news.example", "porn.news.example"], []),
}
#: Expression lists (squidGuard's expressionlist): POSIX extended.
EXPRESSIONS = {"games": ["(^|[./])casino[0-9]*\\.", "poker(stars)?\\.(com|net)"]}

CONF = """\
dbhome {db}
logdir {log}

time lessons {{
    weekly mtwhf 08:00-12:00 13:00-15:30
}}
time lunch {{
    weekly mtwhf 12:00-13:00
}}
time opening {{
    weekly mtwhfa 09:00-18:00
    date *.12.24 09:00-12:00
}}
time holidays {{
    date 2026.07.01-2026.08.31
    date *.12.25
}}

dest porn {{
    domainlist porn/domains
    urllist porn/urls
    redirect http://block.test/porn.html?url=%u&src=%s
}}
dest games {{
    domainlist games/domains
    urllist games/urls
    expressionlist games/expressions
}}
dest social {{
    domainlist social/domains
}}
dest ads {{
    domainlist ads/domains
    urllist ads/urls
    redirect http://block.test/ads.gif
}}
dest good {{
    domainlist good/domains
    urllist good/urls
}}
dest warez {{
    domainlist warez/domains
}}
dest news {{
    domainlist news/domains
}}

src admins {{
    ip 10.0.9.1 10.0.9.2
    user root admin
}}
src teachers {{
    userlist teachers.users
}}
src lab {{
    ip 10.0.5.0/255.255.255.0
    domain lab.school.test
}}
src students {{
    ip 10.0.1.0/24 10.0.2.10-10.0.2.20
    iplist students.ips
}}
src guests {{
    ip 192.168.50.0/24
    within opening
}}
src staff {{
    ip 10.0.3.0/24
}}

rew safe {{
    s@(google\\.[a-z]+/search\\?)@\\1safe=active\\&@i
    s@^http://old\\.school\\.example/@http://school.example/@r
    s@(/zz)@/y&@g
}}

acl {{
    admins {{
        pass !warez !porn
    }}
    teachers within lessons {{
        pass good !porn !warez all
        redirect http://block.test/teachers?t=%t&u=%u&i=%i
    }} else {{
        pass !porn all
        rewrite safe
    }}
    lab {{
        pass good !in-addr none
        redirect http://block.test/lab?a=%a&n=%n
    }}
    students within lessons {{
        pass good !porn !games !social !ads !warez !in-addr all
        redirect http://block.test/students?t=%t&s=%s&p=%p
        rewrite safe
    }} else {{
        pass good !porn !warez !in-addr all
        redirect http://block.test/students-free?t=%t
    }}
    guests {{
        redirect 302:http://block.test/guests?t=%t
    }}
    staff outside lunch {{
        pass !porn !games !social !warez all
        redirect http://block.test/staff?t=%t
    }} else {{
        pass !porn !warez all
        redirect http://block.test/staff-lunch?t=%t
    }}
    default {{
        pass !porn !warez !ads !in-addr all
        redirect http://block.test/default?t=%t&a=%a&u=%u
    }}
}}
"""


def write_tree(root: Path) -> Path:
    """The lists and squidGuard.conf under ``root``; returns the conf's path."""
    db = root / "db"
    for name, (domains, urls) in DESTS.items():
        (db / name).mkdir(parents=True, exist_ok=True)
        (db / name / "domains").write_text("\n".join(domains) + "\n")
        (db / name / "urls").write_text("\n".join(urls) + "\n")
    for name, patterns in EXPRESSIONS.items():
        (db / name / "expressions").write_text("\n".join(patterns) + "\n")
    (db / "teachers.users").write_text("alice\nbob:Bob Teacher\ncarol\nschool\\dave\n")
    (db / "students.ips").write_text("10.0.4.0/24\n10.0.6.7\n")
    (root / "log").mkdir(exist_ok=True)
    conf = root / "squidGuard.conf"
    conf.write_text(CONF.format(db=db, log=root / "log"))
    return conf


#: Clients: (address, host name or None, user or None), every source and its edges.
CLIENTS = [
    ("10.0.9.1", None, "root"),  # admins: ip AND user
    ("10.0.9.2", None, "admin"),
    ("10.0.9.1", None, None),  # admin address, no user: not admins
    ("10.0.9.3", None, "root"),  # user, wrong address
    ("10.0.1.5", None, "alice"),  # teacher user from a student address: teachers first
    ("10.0.7.7", None, "bob"),
    ("10.0.7.7", None, "carol"),
    ("10.0.7.7", None, "dave"),
    ("10.0.7.7", None, "ALICE"),  # user name case
    ("10.0.7.7", None, "Bob"),
    ("10.0.7.7", None, "SCHOOL%5calice"),  # a Windows domain user, escaped as Squid sends it
    ("10.0.7.7", None, "SCHOOL\\alice"),
    ("10.0.7.7", None, "SCHOOL%5cdave"),  # the list has school\dave: escaped as Squid sends it
    ("10.0.7.7", None, "SCHOOL\\dave"),
    ("10.0.9.1", None, "ROOT"),
    ("10.0.5.20", "pc1.lab.school.test", None),  # lab: ip AND domain
    ("10.0.5.20", None, None),  # lab address without a name
    ("10.0.5.20", "pc1.other.test", None),
    ("10.0.1.0", None, None),  # students: CIDR ends
    ("10.0.1.255", None, None),
    ("10.0.0.255", None, None),  # one before
    ("10.0.2.0", None, None),  # one past the CIDR
    ("10.0.2.10", None, None),  # range ends
    ("10.0.2.20", None, None),
    ("10.0.2.9", None, None),
    ("10.0.2.21", None, None),
    ("10.0.4.1", None, None),  # iplist
    ("10.0.6.7", None, None),
    ("10.0.6.8", None, None),
    ("192.168.50.10", None, None),  # guests (opening hours only)
    ("10.0.3.4", None, None),  # staff
    ("172.16.0.1", None, None),  # nobody: default
]

HOSTS = [
    "porn.example",
    "www.porn.example",
    "a.b.xxx.test",
    "adult.example.org",
    "example.org",
    "games.example",
    "play.test",
    "social.example",
    "chat.test",
    "ads.example",
    "tracker.test",
    "school.example",
    "wiki.test",
    "warez.example",
    "news.example",
    "porn.news.example",
    "example.net",
    "www.mixed.test",
    "casino7.example",
    "www.casino.test",
    "pokerstars.com",
    "other.test",
    "1.2.3.4",
    "10.0.0.1",
    "google.com",
    "www.google.de",
    "old.school.example",
    "mixed.test",
    "a.example.net",
    "www.example.net",
    "sub.www.mixed.test",
    "WWW.Porn.Example",
    "porn.example.",
    "games.example:8080",
]
PATHS = [
    "/",
    "/index.html",
    "/porn",
    "/porn/x",
    "/games/",
    "/games/edu",
    "/games/edu/x",
    "/ads",
    "/ads/banner.gif",
    "/adult",
    "/adult/x",
    "/search?q=x",
    "/a?b=c",
    "/pornx",
    "/adsense",
    "/gamesx/",
    "/ads?x=1",
    "/PORN/x",
    "/games/educational",
    "/caf%C3%A9?q=a%26b",  # squidGuard's %u decodes escapes
    "/x%2Fy",
    "/a\\b",  # a backslash and a quote: escaped in urlsieve's quoted reply value
    '/q"x',
    "/zz/a/zz/b",  # the g flag and & (the whole match) of the rewrite
]


def requests(n: int, seed: int = 12) -> list[tuple[str, tuple[str, str | None, str | None]]]:
    """``n`` (URL, client) pairs: every client with a spread of URLs."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        client = CLIENTS[i % len(CLIENTS)]
        host = rng.choice(HOSTS)
        path = rng.choice(PATHS)
        scheme = "https" if rng.random() < 0.1 else "http"
        out.append((f"{scheme}://{host}{path}", client))
    # CONNECT requests (authority form) from a few clients.
    for client in CLIENTS[::4]:
        out.append(("1.2.3.4:443", client))
        out.append(("porn.example:443", client))
        out.append(("school.example:443", client))
    return out


def line(url: str, client: tuple[str, str | None, str | None]) -> str:
    address, name, user = client
    method = "CONNECT" if "://" not in url else "GET"
    return f"{url} {address}/{name or '-'} {user or '-'} {method}"


#: The same policy written natively (urlsieve's TOML tables), by hand.
NATIVE = """\
[policy]
timezone = "UTC"
dbhome = "{db}"

[squid]
mode = "rewrite"
redirect_url = "http://unused.test/"

[[time]]
name = "lessons"
weekly = ["mtwhf 08:00-12:00 13:00-15:30"]

[[time]]
name = "lunch"
weekly = ["mondays tuesdays wednesdays thursdays fridays 12:00-13:00"]

[[time]]
name = "opening"
weekly = ["mtwhfa 09:00-18:00"]
dates = ["*.12.24 09:00-12:00"]

[[time]]
name = "holidays"
dates = ["2026.07.01-2026.08.31", "*.12.25"]

[[dest]]
name = "porn"
domainlist = "porn/domains"
urllist = "porn/urls"
redirect = "http://block.test/porn.html?url=%u&src=%s"

[[dest]]
name = "games"
domainlist = "games/domains"
urllist = "games/urls"
expressionlist = "games/expressions"

[[dest]]
name = "social"
domainlist = "social/domains"

[[dest]]
name = "ads"
domainlist = "ads/domains"
urllist = "ads/urls"
redirect = "http://block.test/ads.gif"

[[dest]]
name = "good"
domainlist = "good/domains"
urllist = "good/urls"

[[dest]]
name = "warez"
domainlist = "warez/domains"

[[dest]]
name = "news"
domainlist = "news/domains"

[[source]]
name = "admins"
ip = ["10.0.9.1", "10.0.9.2"]
user = ["root", "admin"]

[[source]]
name = "teachers"
userlist = "teachers.users"

[[source]]
name = "lab"
ip = ["10.0.5.0/255.255.255.0"]
domain = ["lab.school.test"]

[[source]]
name = "students"
ip = ["10.0.1.0/24", "10.0.2.10-10.0.2.20"]
iplist = "students.ips"

[[source]]
name = "guests"
ip = ["192.168.50.0/24"]
within = "opening"

[[source]]
name = "staff"
ip = ["10.0.3.0/24"]

[[rewrite]]
name = "safe"
substitutions = [
    's@(google\\.[a-z]+/search\\?)@\\1safe=active\\&@i',
    's@^http://old\\.school\\.example/@http://school.example/@r',
    's@(/zz)@/y&@g',
]

[[acl]]
source = "admins"
pass = ["!warez", "!porn"]

[[acl]]
source = "teachers"
within = "lessons"
pass = ["good", "!porn", "!warez", "all"]
redirect = "http://block.test/teachers?t=%t&u=%u&i=%i"
else = {{ pass = ["!porn", "all"], rewrite = "safe" }}

[[acl]]
source = "lab"
pass = ["good", "!in-addr", "none"]
redirect = "http://block.test/lab?a=%a&n=%n"

[[acl]]
source = "students"
within = "lessons"
pass = ["good", "!porn", "!games", "!social", "!ads", "!warez", "!in-addr", "all"]
redirect = "http://block.test/students?t=%t&s=%s&p=%p"
rewrite = "safe"

[acl.else]
pass = ["good", "!porn", "!warez", "!in-addr", "all"]
redirect = "http://block.test/students-free?t=%t"

[[acl]]
source = "guests"
pass = ["!porn", "!warez", "!ads", "!in-addr", "all"]  # the default ACL's, as squidGuard
redirect = "302:http://block.test/guests?t=%t"

[[acl]]
source = "staff"
outside = "lunch"
pass = ["!porn", "!games", "!social", "!warez", "all"]
redirect = "http://block.test/staff?t=%t"
else = {{ pass = ["!porn", "!warez", "all"], redirect = "http://block.test/staff-lunch?t=%t" }}

[[acl]]
source = "default"
pass = ["!porn", "!warez", "!ads", "!in-addr", "all"]
redirect = "http://block.test/default?t=%t&a=%a&u=%u"
"""


def write_native(root: Path) -> Path:
    """The native configuration beside the tree :func:`write_tree` wrote."""
    path = root / "urlsieve.toml"
    path.write_text(NATIVE.format(db=root / "db"))
    return path
