"""The "checking this site" page: what a browser gets for an unknown site past its burst.

With ``learn.unknown = "allow-first"`` the first ``learn.burst`` requests of a site no rule
decides pass; later ones, with ``learn.pending = "check"``, are sent (302) to the service's
``GET /v1/pending?url=…``, which renders this page from the current rules:

* **checking** — no verdict yet: a short page that reloads itself every
  :data:`REFRESH_SECONDS` (``<meta http-equiv="refresh">``; no script);
* **allowed** — the verdict landed and allows the URL (or the site is known clean): the
  page sends the browser on to the URL at once (a refresh to it, and a link);
* **blocked** — the verdict landed and blocks it: the page says so, with the category,
  and stops reloading.

Plain server-rendered HTML, one function, no external resources; everything it shows of
the URL is escaped, and only an http(s) URL of printable ASCII is ever a refresh target.
"""

from __future__ import annotations

import html

__all__ = ["PENDING_STATES", "REFRESH_SECONDS", "pending_page"]

#: How often the checking page reloads itself.
REFRESH_SECONDS = 1
#: What the page can say.
PENDING_STATES = ("checking", "allowed", "blocked")


def _followable(url: str) -> bool:
    """Whether ``url`` may be a refresh target: http(s), printable ASCII, no blanks."""
    return (
        url.lower().startswith(("http://", "https://"))
        and url.isascii()
        and url.isprintable()
        and " " not in url
    )


def pending_page(url: str, state: str, category: str | None = None) -> str:
    """The page for ``url`` in ``state`` (one of :data:`PENDING_STATES`)."""
    if state not in PENDING_STATES:
        raise ValueError(f"state must be one of {PENDING_STATES}, not {state!r}")
    shown = html.escape(url[:2000], quote=True)
    follow = _followable(url)
    if state == "checking":
        refresh = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        title = "Checking this site"
        body = (
            f"<h1>Checking this site</h1>\n<p>This site is new here and is being checked "
            f"now: <code>{shown}</code>. The page reloads itself and goes on as soon as "
            "the check is done (usually within a second or two).</p>"
        )
    elif state == "allowed":
        target = html.escape(url, quote=True)
        refresh = f'<meta http-equiv="refresh" content="0;url={target}">' if follow else ""
        title = "Checked"
        link = f'<a href="{target}">{shown}</a>' if follow else f"<code>{shown}</code>"
        body = f"<h1>Checked</h1>\n<p>The site is allowed: continue to {link}.</p>"
    else:
        refresh = ""
        title = "Blocked"
        what = html.escape(category or "a blocked category", quote=True)
        body = (
            f"<h1>Blocked</h1>\n<p>The check is done: <code>{shown}</code> is in "
            f"<strong>{what}</strong> and is blocked.</p>"
        )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"{refresh}<title>{title}</title></head><body>\n{body}\n</body></html>\n"
    )
