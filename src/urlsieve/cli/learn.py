"""``urlsieve learn``: the self-learning gateway's learner and its review commands.

``run`` crawls and classifies what the gateway queued; ``list``/``show`` say what was
learned and why; ``allow``/``block``/``forget`` are an operator's overrides, which
survive re-learning; ``stats`` shows the queue and the verdicts. All read the ``[learn]``
section of the gateway's config file (``--config`` or ``$URLSIEVE_CONFIG``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from urlsieve._accel import slow_path_message
from urlsieve.exceptions import ConfigError, InvalidURL, LearnError

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "learn",
        help="the self-learning gateway: crawl and classify unknown URLs, review verdicts",
        description=(
            "Learn verdicts for the URLs the gateway queued as unknown (learn.queue): crawl "
            "them, classify their pages with phrase lists, and write the learned rules into "
            "the overlay snapshot the gateway loads beside its own rules. Reads the [learn] "
            "section of the config file."
        ),
    )
    p.add_argument("--config", metavar="FILE", help="TOML configuration (or $URLSIEVE_CONFIG)")
    cmds = p.add_subparsers(dest="learn_command", metavar="ACTION", required=True)
    run = cmds.add_parser("run", help="crawl and classify queued URLs until stopped")
    which = run.add_mutually_exclusive_group()
    which.add_argument("--crawl-only", action="store_true", help="only fetch pages to the spool")
    which.add_argument("--classify-only", action="store_true", help="only classify the spool")
    run.add_argument("--until-idle", action="store_true", help="stop when nothing is left to do")
    run.add_argument("--consumer", metavar="NAME", help="this learner's name in the queue")
    run.set_defaults(run=_run)
    lst = cmds.add_parser("list", help="the learned verdicts")
    lst.add_argument("--source", choices=["learned", "redirect", "override"])
    lst.add_argument("--action", choices=["block", "allow"])
    lst.set_defaults(run=_list)
    show = cmds.add_parser("show", help="what was learned about a URL, and why")
    show.add_argument("url")
    show.set_defaults(run=_show)
    for name, help_text in (
        ("allow", "allow a URL (or a host) whatever is learned"),
        ("block", "block a URL (or a host) whatever is learned"),
    ):
        o = cmds.add_parser(name, help=help_text)
        o.add_argument("url", help="a URL, or a host name for the whole host")
        if name == "block":
            o.add_argument("--category", default="blocked", help="category to block under")
        o.add_argument("--note", default="", help="why (kept with the override)")
        o.set_defaults(run=_override, action=name)
    forget = cmds.add_parser("forget", help="drop what was learned (or set) for a URL")
    forget.add_argument("url")
    forget.set_defaults(run=_forget)
    stats = cmds.add_parser("stats", help="queue depth and verdicts learned")
    stats.set_defaults(run=_stats)


def _settings(args: argparse.Namespace) -> Any:
    from urlsieve.config import read_config

    path = args.config or os.environ.get("URLSIEVE_CONFIG")
    if not path:
        raise ConfigError("no config file: pass --config FILE (with a [learn] section)")
    return read_config(path, env={}, needs_rules=False).learner()


def _store(settings: Any) -> Any:
    from urlsieve.learn.verdicts import open_verdicts

    settings.directory.mkdir(parents=True, exist_ok=True)
    return open_verdicts(settings.verdicts_spec)


def _base_check(config_path: str | None) -> Callable[[str], tuple[str, str] | None]:
    """The gateway's current rules (base and learned), as the crawler's redirect check."""
    from urlsieve.config import filter_loader, load_config, rules_watch
    from urlsieve.gateway.live import LiveRules

    config = load_config(config_path, env=os.environ)
    rules = LiveRules(filter_loader(config), watch=rules_watch(config), check_seconds=1.0)

    def check(url: str) -> tuple[str, str] | None:
        rules.poll()
        try:
            verdict = rules.get().check(url)
        except InvalidURL:
            return None
        if verdict.action != "block" or verdict.rule is None:
            return None
        return verdict.rule.category, verdict.rule.where

    return check


def _run(args: argparse.Namespace) -> int:
    from urlsieve.learn.classify import Classifier
    from urlsieve.learn.crawl import CrawlSettings
    from urlsieve.learn.phrases import PhraseSet
    from urlsieve.learn.runner import Learner

    settings = _settings(args)

    def log(message: str) -> None:
        print(f"urlsieve learn: {message}", file=sys.stderr, flush=True)

    if (slow := slow_path_message()) is not None:
        log(slow)
    classifier = None
    if not args.crawl_only:
        phrases = PhraseSet.load(
            weighted=settings.phrases,
            banned=settings.banned,
            exception=settings.exceptions,
            lexicons=settings.lexicons,
        )
        for error in phrases.errors:
            log(f"skipped: {error}")
        if not phrases.phrases:
            raise ConfigError(
                "no phrases loaded: set learn.phrases, learn.banned or learn.lexicons"
            )
        phrases, limits = _named_as_the_lists(phrases, settings, log)
        classifier = Classifier(phrases, limit=settings.limit, limits=limits)
        log(f"{len(phrases.phrases)} phrases loaded")
    queue = _open_queue_retrying(settings.queue, log)
    store = _store(settings)
    spool = dict(settings.spool)
    learner = Learner(
        queue=queue,
        store=store,
        classifier=classifier,
        spool_dir=settings.spool_dir,
        tree=settings.tree,
        overlay=settings.overlay,
        crawl=CrawlSettings(**settings.crawl),
        check_hop=None if args.classify_only else _base_check(settings.source_file),
        batch=settings.batch,
        lease=settings.lease_seconds,
        promote_after=settings.promote_after,
        unclassifiable=settings.unclassifiable,
        segment_bytes=spool.get("segment_bytes", 64 << 20),
        segment_seconds=spool.get("segment_seconds", 0.1),
        spool_max_bytes=spool.get("max_bytes", 1 << 30),
        consumer=args.consumer,
        metrics_file=settings.directory / "learn.prom",
        progress=_progress_line if sys.stderr.isatty() else None,
        log=log,
    )
    if not settings.overlay.exists() and not args.crawl_only:
        learner.rebuild()  # the gateway finds an (empty) overlay from the start

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await learner.run(
            stop,
            crawl=not args.classify_only,
            classify=not args.crawl_only,
            until_idle=args.until_idle,
        )

    started = time.monotonic()
    try:
        asyncio.run(main())
    finally:
        queue.close()
        store.close()
    s = learner.stats
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(s.outcomes.items())) or "none"
    classified = ", ".join(f"{n} {k}" for k, n in sorted(s.classified.items())) or "none"
    log(
        f"done in {time.monotonic() - started:.1f} s: {s.claimed} claimed; fetched: {outcomes}; "
        f"classified: {classified}; {s.overlay_builds} overlay builds"
    )
    return 0


def _named_as_the_lists(
    phrases: Any, settings: Any, log: Callable[[str], None]
) -> tuple[Any, dict[str, int]]:
    """The phrases with their categories spelled as the gateway's lists spell them
    (matched ignoring case: a phrase list's ``Gambling`` is UT1's ``gambling``), and
    ``learn.limits`` keyed by those names (an unknown key is reported, with a "did you
    mean")."""
    from urlsieve.config import configured_category_names
    from urlsieve.rules.categories import did_you_mean, resolve

    names: set[str] = set()
    try:
        names = configured_category_names(settings.source_file)
    except Exception as exc:  # the learner runs without lists too (names left as written)
        log(f"category names kept as the phrase lists write them: {exc}")
    renamed = phrases.renamed(lambda name: resolve(name, names) or name)
    for old in sorted(phrases.categories - renamed.categories):
        log(f"phrase category {old!r} learned as {resolve(old, names)!r} (the lists' name)")
    limits: dict[str, int] = {}
    for key, value in settings.limits.items():
        found = resolve(key, renamed.categories)
        if found is None:
            log(f"learn.limits: no phrase category {key!r}" + did_you_mean(key, renamed.categories))
            found = key
        limits[found] = value
    return renamed, limits


def _admin(args: argparse.Namespace) -> Any:
    from urlsieve.config import open_learn_admin

    return open_learn_admin(_settings(args))


def _open_queue_retrying(spec: str, log: Callable[[str], None]) -> Any:
    """The learner's queue; a server that does not answer yet is asked again (backing off
    to 10 s) until it does or the learner is stopped: what it holds is not lost."""
    from urlsieve.exceptions import QueueUnavailable
    from urlsieve.learn.queue import open_queue

    wait = 0.5
    while True:
        try:
            return open_queue(spec)
        except QueueUnavailable as exc:
            log(f"queue unavailable, retrying in {wait:.1f} s: {exc}")
            time.sleep(wait)
            wait = min(wait * 2, 10.0)


def _progress_line(stats: Any, depth: int | None) -> None:
    """A status line a terminal rewrites in place every second."""
    fetched = sum(stats.outcomes.values())
    blocked = sum(n for c, n in stats.classified.items() if c != "clean")
    queued = "?" if depth is None else str(depth)
    print(
        f"\r\x1b[Kqueue {queued}  claimed {stats.claimed}  fetched {fetched}  "
        f"classified {sum(stats.classified.values())} ({blocked} blocked)  "
        f"p50 to enforcement {_median(stats.latencies)}",
        end="",
        file=sys.stderr,
        flush=True,
    )


def _median(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.2f} s"


def _list(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        for v in admin.verdicts(args.source, args.action):
            print(f"{v.action}\t{v.category}\t{v.source}\t{v.score}\t{v.key}")
        if args.source in (None, "learned"):  # hosts promoted whole by the learner
            for v in admin.promoted():
                if args.action in (None, v.action):
                    print(f"{v.action}\t{v.category}\t{v.source}\t{v.score}\t{v.key}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from urlsieve.learn.verdicts import rule_key

    with _admin(args) as admin:
        found = admin.find(args.url)
        refused = admin.refusal(args.url) if found is None else None
        site = admin.site(args.url)
    if found is None:
        if site["verdict"] is not None:
            print(f"{rule_key(args.url)[0]}: no verdict of its own: its site's verdict decides")
            _print_site(site)
            return 0
        if refused is not None:
            print(f"{rule_key(args.url)[0]}: nothing learned: the crawler does not fetch it: "
                  f"{refused}")  # fmt: skip
        else:
            print(f"{rule_key(args.url)[0]}: nothing learned (unknown to the learner)")
        _print_site(site)
        return 1
    _print_site(site)
    print(f"rule:      {found.key}{'  (the whole host)' if found.is_host else ''}")
    print(f"verdict:   {found.action} ({found.category}), by {found.source}")
    if found.source != "override":
        print(
            f"score:     {found.score}  ({found.note})" if found.note else f"score: {found.score}"
        )
    for phrase, weight, count in found.evidence:
        print(f"  phrase   {phrase!r} weight {weight} × {count}")
    for label, value in (
        ("url", found.url),
        ("final", found.final_url),
        ("sha256", found.content_hash),
    ):
        if value and (label != "final" or value != found.url):
            print(f"{label + ':':<10} {value}")
    when = found.fetched_at or found.decided_at
    print(f"{'when:':<10} {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(when))}")
    if found.source == "override" and found.note:
        print(f"{'note:':<10} {found.note}")
    return 0


def _print_site(site: dict[str, Any]) -> None:
    """The site's lines of ``learn show``: its verdict, and the pages that differ from it."""
    verdict = site["verdict"]
    counts = ", ".join(f"{n} {c}" for c, n in sorted(site["blocked"].items()))
    pages = f"{site['pages']} pages learned" + (
        f" ({counts} blocked, {site['allowed']} allowed)" if site["pages"] else ""
    )
    print(f"site:      {site['domain']}: {site['state']}; {pages}")
    if verdict is not None:
        print(f"{'':<10} {verdict.note or f'by {verdict.source}'}")
    for page in site["exceptions"][:20]:
        print(f"exception: {page.action} ({page.category}) {page.key}  [{page.source}]")
    if len(site["exceptions"]) > 20:
        print(f"{'':<10} … {len(site['exceptions']) - 20} more exceptions")


def _override(args: argparse.Namespace) -> int:
    category = args.category if args.action == "block" else None
    with _admin(args) as admin:
        try:
            done = admin.override(args.url, args.action, category, args.note)
        except ValueError as exc:  # refused input: say so, and that nothing was stored
            raise LearnError(f"{admin.store.path}: nothing stored: {exc}") from exc
        config_path = admin.settings.source_file
    print(
        f"{args.action} {done['key']} ({done['category']}): overlay rebuilt, "
        f"{done['overlay_rules']} rules"
    )
    _warn_if_base_decides(config_path, args.url, args.action)
    return 0


def _warn_if_base_decides(config_path: str | None, url: str, action: str) -> None:
    """Learned rules and overrides apply only where the administrator's lists decide
    nothing: say so when they already decide this URL."""
    from urlsieve.config import base_loader, load_config

    try:
        base = base_loader(load_config(config_path, env=os.environ))()
        verdict = base.check(url if "://" in url else f"http://{url}/")
    except Exception:  # the lists are the gateway's business: no warning is no error
        return
    if verdict.rule is not None and verdict.action != action:
        print(
            f"note: the administrator's lists {verdict.action} this URL ({verdict.rule.where}); "
            "they win over learned rules and overrides: change the lists instead",
            file=sys.stderr,
        )


def _forget(args: argparse.Namespace) -> int:
    from urlsieve.learn.verdicts import rule_key

    key, _host = rule_key(args.url)
    with _admin(args) as admin:
        gone = admin.forget(args.url)
    print(f"{key}: {'forgotten' if gone else 'nothing was learned'}; overlay rebuilt")
    return 0 if gone else 1


def _stats(args: argparse.Namespace) -> int:
    from urlsieve.learn.queue import open_queue

    settings = _settings(args)
    with open_queue(settings.queue) as queue:
        stats = queue.stats()
    print("queue:")
    for name, value in stats.as_dict().items():
        print(f"  {name}: {value}")
    with _store(settings) as store:
        counts = store.counts()
    print(f"verdicts: {sum(counts.values())}")
    for (source, action, category), n in sorted(counts.items()):
        print(f"  {source} {action} {category}: {n}")
    metrics = settings.directory / "learn.prom"
    if metrics.exists():
        print(f"metrics (last run): {metrics}")
        for line in metrics.read_text("utf-8", "replace").splitlines():
            found = re.fullmatch(r'urlsieve_learn_refused_total\{setting="([^"]*)"\} (\d+)', line)
            if found:
                print(
                    f"  not fetched (address or port refused): {found.group(2)}; "
                    f"the setting that would allow them: {found.group(1)}"
                )
    return 0
