"""The structured form of a canonical URL."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_PORTS", "URL"]

#: The port each accepted scheme uses when none is written.
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


class URL(NamedTuple):
    """A canonical URL and its parts: a named tuple, as ``urllib.parse.SplitResult`` is.

    ``host`` is lower-case ASCII (punycode for IDN), a dotted-quad IPv4
    address, or a bracketed compressed IPv6 address. ``path`` always starts
    with ``/``. ``query`` is ``None`` when the URL had no ``?`` at all and
    ``""`` for a bare ``?``. ``userinfo`` and ``port`` are kept here but are
    not part of :attr:`canonical`: a filter decides on where a request goes,
    not on who asks or through which port. With ``keeps_port`` (the crawler
    profile) a port other than the scheme's default is part of
    :attr:`canonical` and :attr:`location`: ``:8080`` is another server.

    A tuple rather than a frozen dataclass because the parser builds one per
    request: a tuple is built in one step (in C on the fast path), where a
    frozen dataclass sets each field through ``object.__setattr__`` (over a
    microsecond). :meth:`_replace` gives a changed copy.
    """

    scheme: str
    host: str
    path: str
    query: str | None = None
    port: int | None = None
    userinfo: str | None = None
    is_ip: bool = False
    keeps_port: bool = False

    @property
    def canonical(self) -> str:
        """``scheme://host[:port]/path[?query]`` (a port only with ``keeps_port``)."""
        return f"{self.scheme}://{self.location}"

    @property
    def location(self) -> str:
        """``host[:port]/path[?query]``: the canonical URL without its scheme (what rules see)."""
        netloc = self.host
        if self.keeps_port and self.port not in (None, DEFAULT_PORTS.get(self.scheme)):
            netloc = f"{self.host}:{self.port}"
        if self.query is None:
            return f"{netloc}{self.path}"
        return f"{netloc}{self.path}?{self.query}"

    def __str__(self) -> str:
        return self.canonical

    def __repr__(self) -> str:
        return (
            f"URL(scheme={self.scheme!r}, host={self.host!r}, path={self.path!r}, "
            f"query={self.query!r}, port={self.port!r}, userinfo={self.userinfo!r}, "
            f"is_ip={self.is_ip!r})"
        )
