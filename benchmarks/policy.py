"""Policies (issue 12): the Squid helper with a 7-group policy against squidGuard 1.6 running the
same squidGuard.conf, and what the policy costs a request over the plain lookup.

Run: ``python benchmarks/policy.py [--repeats 3] [--write]`` (Debian's ``squidguard`` and
``faketime``; UT1 from ../shared/data, else generated categories).

1. Throughput, bulk-piped Squid redirector protocol (lines written while replies are
   read), both under ``faketime`` on a Monday at 10:00 (the lessons time rule holds):
   squidGuard on its ``-C all`` Berkeley DB databases, urlsieve's helper on the snapshot
   ``urlsieve import squidguard`` wrote from the same squidGuard.conf. The policy: 7
   sources (addresses, CIDRs, ranges, an iplist, users, a userlist), 2 time rules, ACLs
   with within/outside/else, per-ACL and per-destination block pages, a rewrite and
   ``!in-addr``, up to 15 UT1 categories per pass list. Requests: real traffic plus URLs
   derived from the lists, from clients of every source in turn.
2. Per-request policy cost, in-process: ``Filter.decide_ids`` with the categories of one
   pass list against ``PolicyEngine.decide_many`` (the compiled batch) and its Python
   reference ``decide_many_py`` on the same URLs (clients of every source); the
   difference per URL is what the policy adds to the lookup.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import benchmarks._common as common
from benchmarks._common import load_note, machine, table, verdict, write_section
from benchmarks.filter import SQUIDGUARD, black_categories, generated_tree
from urlsieve.policy.build import build_rules
from urlsieve.policy.engine import PolicyEngine, Who
from urlsieve.policy.squidguard import read_squidguard

FAKETIME = shutil.which("faketime")
WHEN = "2026-05-04 10:00:00"  # a Monday, in lessons
UT1 = common.SHARED_DATA / "ut1-blacklists"
CATEGORIES = [
    "adult",
    "malware",
    "phishing",
    "gambling",
    "games",
    "social_networks",
    "dating",
    "chat",
    "audio-video",
    "warez",
    "hacking",
    "agressif",
    "lingerie",
    "drogue",
    "vpn",
]

CONF = """\
dbhome {db}
logdir {log}

time lessons {{
    weekly mtwhf 08:00-12:00 13:00-16:00
}}
time lunch {{
    weekly mtwhf 12:00-13:00
}}

{dests}

src admins {{
    ip 10.0.9.0/28
    user root admin
}}
src teachers {{
    userlist teachers.users
}}
src staff {{
    ip 10.0.3.0/24
}}
src students {{
    ip 10.0.1.0/24 10.0.2.10-10.0.2.200
    iplist students.ips
}}
src lab {{
    ip 10.0.5.0/255.255.255.0
}}
src guests {{
    ip 192.168.50.0/24
}}
src library {{
    ip 10.0.6.0/24
}}

rew safe {{
    s@(google\\.[a-z.]+/search\\?)@\\1safe=active\\&@i
}}

acl {{
    admins {{
        pass !malware !phishing all
    }}
    teachers within lessons {{
        pass !adult !malware !phishing !gambling !dating !agressif all
        redirect http://block.test/teachers?t=%t&u=%u
    }} else {{
        pass !malware !phishing all
    }}
    staff outside lunch {{
        pass !adult !malware !phishing !gambling !games !social_networks !dating all
        redirect http://block.test/staff?t=%t
    }} else {{
        pass !adult !malware !phishing all
    }}
    students within lessons {{
        pass {student_pass} !in-addr all
        redirect http://block.test/students?t=%t&s=%s&u=%u
        rewrite safe
    }} else {{
        pass !adult !malware !phishing !gambling !dating !warez !hacking !in-addr all
    }}
    lab {{
        pass !adult !malware !phishing !games !social_networks !chat !in-addr all
        redirect http://block.test/lab?a=%a
    }}
    guests {{
        pass !adult !malware !phishing !gambling !dating !warez !hacking !in-addr all
        redirect 302:http://block.test/guests?t=%t
    }}
    library {{
        pass !adult !malware !phishing !gambling !games !dating !in-addr all
    }}
    default {{
        pass !adult !malware !phishing !in-addr all
        redirect http://block.test/default?t=%t&a=%a&u=%u
    }}
}}
"""

#: A client of every source, and one of none (the default ACL).
CLIENTS = [
    "10.0.9.1/- root",
    "10.0.7.7/- alice",
    "10.0.3.9/- -",
    "10.0.1.20/- -",
    "10.0.2.50/- -",
    "10.0.4.4/- -",
    "10.0.5.5/pc5.lab -",
    "192.168.50.10/- -",
    "10.0.6.6/- -",
    "172.16.0.1/- -",
]


def write_policy(root: Path, categories: list[Path]) -> Path:
    db = root / "db"
    dests = []
    names = []
    for src in categories:
        dst = db / src.name
        dst.mkdir(parents=True, exist_ok=True)
        lines = [f"dest {src.name} {{"]
        for name, kind in (("domains", "domainlist"), ("urls", "urllist")):
            if (src / name).exists() and (src / name).stat().st_size:
                shutil.copyfile(src / name, dst / name)
                lines.append(f"    {kind} {src.name}/{name}")
        if src.name == "malware":
            lines.append("    redirect http://block.test/malware?u=%u")
        lines.append("}")
        if len(lines) > 2 or src.name == "malware":
            dests.append("\n".join(lines))
            names.append(src.name)
    (db / "teachers.users").write_text("alice\nbob\ncarol\n")
    (db / "students.ips").write_text("10.0.4.0/24\n")
    (root / "log").mkdir(exist_ok=True)
    student_pass = " ".join(f"!{n}" for n in names)
    conf = root / "squidGuard.conf"
    conf.write_text(
        CONF.format(db=db, log=root / "log", dests="\n".join(dests), student_pass=student_pass)
    )
    return conf


def request_lines(n: int) -> tuple[list[str], list[str], list[Who], str]:
    traffic, source = common.traffic_urls()
    rnd = random.Random(5)
    urls = [
        u.strip() for u in traffic if u.strip().isascii() and " " not in u.strip() and "://" in u
    ]
    rnd.shuffle(urls)
    urls = (urls * (n // max(len(urls), 1) + 1))[:n]
    lines, whos = [], []
    for i, url in enumerate(urls):
        client = CLIENTS[i % len(CLIENTS)]
        lines.append(f"{url} {client} GET")
        address, user = client.split(" ")
        ip, _, name = address.partition("/")
        whos.append(Who(ip, None if name == "-" else name, None if user == "-" else user))
    return lines, urls, whos, source


def run(cmd: list[str], lines: list[str]) -> tuple[list[bytes], float]:
    env = {**os.environ, "TZ": "UTC"}
    proc = subprocess.Popen(
        [FAKETIME or "faketime", WHEN, *cmd],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    out, seconds = common.exchange(proc, "http://warm.up.invalid/ 10.0.0.1/- - GET", lines)
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()
    return out, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    if not (SQUIDGUARD and FAKETIME):
        print("squidGuard and faketime are needed (apt-get install squidguard faketime)")
        return 1
    work = Path(tempfile.mkdtemp(prefix="urlsieve-policy-bench-"))
    try:
        if UT1.exists():
            available = {p.name: p for p in black_categories(UT1)}
            categories = [available[c] for c in CATEGORIES if c in available]
            data = f"UT1 ({len(categories)} categories)"
        else:
            # made-up entries under UT1's names: the policy's ACLs name those categories
            generated = generated_tree(work / "gen", 200_000, 50_000)
            categories = [
                made.rename(made.with_name(name))
                for made, name in zip(generated, CATEGORIES, strict=False)
            ]
            data = "generated categories (../shared/data absent)"
        conf = write_policy(work, categories)
        started = time.perf_counter()
        subprocess.run([SQUIDGUARD, "-c", str(conf), "-C", "all"], check=True, capture_output=True)
        sg_build = time.perf_counter() - started
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "urlsieve",
                "import",
                "squidguard",
                str(conf),
                "-o",
                str(work / "imp"),
                "--timezone",
                "UTC",
            ],
            check=True,
            capture_output=True,
        )
        compile_s = time.perf_counter() - started
        lines, urls, whos, source = request_lines(args.lines)
        ours_cmd = [
            sys.executable,
            "-m",
            "urlsieve",
            "squid-helper",
            "--config",
            str(work / "imp" / "urlsieve.toml"),
            "--channels",
            "no",
        ]
        sg_cmd = [SQUIDGUARD, "-c", str(conf)]
        sg_times, our_times = [], []
        for _ in range(args.repeats):
            sg_out, seconds = run(sg_cmd, lines)
            sg_times.append(seconds)
            our_out, seconds = run(ours_cmd, lines)
            our_times.append(seconds)
        sg_rate = len(lines) / statistics.median(sg_times)
        our_rate = len(lines) / statistics.median(our_times)
        same = sum(a == b for a, b in zip(our_out, sg_out, strict=True))
        classes = _differences(our_out, sg_out)
        blocked_sg = sum(b.startswith(b"OK") for b in sg_out)
        blocked_us = sum(b.startswith(b"OK") for b in our_out)
        ratio = our_rate / sg_rate
        # 2. per-request policy cost, in-process.
        read = read_squidguard(conf)
        read.policy.timezone = "UTC"
        rules = build_rules(read.policy)
        engine = PolicyEngine(read.policy, rules.filter, expressions=rules.expressions)
        stamp = 1777888800.0  # WHEN as a Unix time (UTC)
        sample, sample_whos = urls[:50_000], whos[:50_000]
        one_list = [
            e.name
            for e in read.policy.acls["students"].branch.passes
            if not e.allow and e.name != "in-addr"
        ]
        flt = rules.filter

        def plain(batch: list[str]) -> None:
            for i in range(0, len(batch), 64):
                flt.decide_ids(batch[i : i + 64], one_list)

        def compiled(batch: list[str]) -> None:
            for i in range(0, len(batch), 64):
                engine.decide_many(batch[i : i + 64], sample_whos[i : i + 64], stamp)

        def reference(batch: list[str]) -> None:
            for i in range(0, len(batch), 64):
                engine.decide_many_py(batch[i : i + 64], sample_whos[i : i + 64], stamp)

        # In turns, each run on new strings (nothing cached on them); medians.
        per: dict[str, list[float]] = {}
        for _ in range(max(args.repeats, 5)):
            for name, fn in (("plain", plain), ("compiled", compiled), ("py", reference)):
                fresh = [(u + " ")[:-1] for u in sample]
                started = time.perf_counter()
                fn(fresh)
                per.setdefault(name, []).append((time.perf_counter() - started) / len(fresh))
        per_plain, per_policy, per_py = (
            statistics.median(per[name]) * 1e6 for name in ("plain", "compiled", "py")
        )
        cost = per_policy - per_plain
        cost_py = per_py - per_plain
        body = (
            f"Machine: {machine()}. Data: {data}; requests: {len(lines):,} from {source}, "
            f"from {len(CLIENTS)} clients in turn (every source and the default). Clock pinned by "
            f"faketime at {WHEN} UTC (lessons hold). Median of {args.repeats} runs. squidGuard "
            f"database build (`-C all`): {sg_build:.1f} s; `urlsieve import squidguard` "
            f"(read the conf and lists, compile the snapshot): {compile_s:.1f} s.\n\n"
            + table(
                ["", "squidGuard 1.6", "urlsieve squid-helper", "ratio"],
                [
                    ["lines/s", f"{sg_rate:,.0f}", f"{our_rate:,.0f}", f"**{ratio:.2f}×**"],
                    ["blocked or rewritten", f"{blocked_sg:,}", f"{blocked_us:,}", ""],
                    ["replies equal to squidGuard's", "", f"{same / len(lines):.2%}", ""],
                ],
            )
            + "\n\nReplies that differ, by class: "
            + ", ".join(f"{name} {n:,}" for name, n in classes.items())
            + ". `u-decoded`: squidGuard inserts `%u` percent-decoded (raw bytes, a `%26` "
            'as `&`), urlsieve as sent; `quoting`: urlsieve escapes `"` and `\\` in the '
            "quoted value as Squid's parser expects; `unreadable`: a line squidGuard answers "
            "`BH` and urlsieve's failure mode blocks; `other`: a different decision "
            "(canonicalisation, urllist semantics: tests/policy/test_squidguard_differential.py)."
            + "\n\nGoals: ≥ 5× squidGuard's throughput with the 7-group policy (issue 12): "
            + f"{verdict(ratio >= 5)}; ≥ 15× (issue 34): {verdict(ratio >= 15)}.\n\n"
            f"Per-request policy cost (in-process, batches of 64, {len(sample):,} URLs, new "
            "strings every run, the three in turns, medians of "
            f"{max(args.repeats, 5)} runs):\n\n"
            + table(
                ["call", "µs/URL", "over the plain lookup"],
                [
                    [
                        f"`Filter.decide_ids`, one pass list's {len(one_list)} categories",
                        f"{per_plain:.2f}",
                        "",
                    ],
                    [
                        "`PolicyEngine.decide_many` (compiled batch: source, time rule, ACL, "
                        "pass-list walk, in-addr, rewrite prefilter)",
                        f"{per_policy:.2f}",
                        f"**{cost:+.2f} µs**",
                    ],
                    [
                        "`PolicyEngine.decide_many_py` (its Python reference)",
                        f"{per_py:.2f}",
                        f"{cost_py:+.2f} µs",
                    ],
                ],
            )
            + f"\n\nGoal ≤ 0.5 µs a request over the plain lookup (issue 34): "
            f"{verdict(cost <= 0.5)}. This run: {load_note()}."
            "\n\n"
            "Reproduce: `python benchmarks/policy.py --repeats 3 --write`"
        )
        print(body)
        if args.write:
            write_section(
                "policy", "## Policies: 7 groups against squidGuard (issue 12)\n\n" + body
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _differences(ours: list[bytes], theirs: list[bytes]) -> dict[str, int]:
    from collections import Counter
    from urllib.parse import unquote_to_bytes

    out: Counter[str] = Counter()
    for a, b in zip(ours, theirs, strict=True):
        if a == b:
            continue
        plain = a.replace(b'\\"', b'"').replace(b"\\\\", b"\\")
        if plain == b:
            out["quoting"] += 1
        elif unquote_to_bytes(plain.replace(b"%20", b"\0")).replace(b"\0", b"%20") == b:
            out["u-decoded"] += 1
        elif b.startswith(b"BH"):
            out["unreadable"] += 1
        else:
            out["other"] += 1
    return dict(out)


if __name__ == "__main__":
    raise SystemExit(main())
