"""A fetched page, as the crawler hands it to the spool and the spool to the classifier."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Page"]


@dataclass(frozen=True, slots=True)
class Page:
    """One fetched page. ``body`` has its Content-Encoding removed and is cut at the
    crawler's byte cap (``truncated`` says so); ``headers`` are the final response's,
    decoded as Latin-1; ``hops`` is the redirect chain, start URL first, final URL last
    (empty without a redirect)."""

    url: str
    final_url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    fetched_at: float
    truncated: bool = False
    hops: tuple[str, ...] = ()
    #: When the gateway first saw the URL (epoch seconds): time to enforcement is measured
    #: from it. None when unknown (a URL queued by hand).
    queued_at: float | None = None
    #: The queue's key of the job this page answers: the classifier finishes the job once
    #: the page's verdict is stored, so a learner that dies before loses nothing.
    job: str | None = None
    #: What the crawler found out about the page on the way, kept with the verdict (the
    #: site answered another identity differently: cloaking).
    note: str = ""

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (any case), or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    @property
    def content_type(self) -> str | None:
        return self.header("content-type")
