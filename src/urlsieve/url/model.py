"""The structured form of a canonical URL."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["URL"]


@dataclass(frozen=True, slots=True)
class URL:
    """A canonical URL and its parts.

    ``host`` is lower-case ASCII (punycode for IDN), a dotted-quad IPv4
    address, or a bracketed compressed IPv6 address. ``path`` always starts
    with ``/``. ``query`` is ``None`` when the URL had no ``?`` at all and
    ``""`` for a bare ``?``. ``userinfo`` and ``port`` are kept here but are
    not part of :attr:`canonical`: a filter decides on where a request goes,
    not on who asks or through which port.
    """

    scheme: str
    host: str
    path: str
    query: str | None = None
    port: int | None = None
    userinfo: str | None = None
    is_ip: bool = False

    @property
    def canonical(self) -> str:
        """``scheme://host/path[?query]``."""
        if self.query is None:
            return f"{self.scheme}://{self.host}{self.path}"
        return f"{self.scheme}://{self.host}{self.path}?{self.query}"

    @property
    def location(self) -> str:
        """``host/path[?query]``: the canonical URL without its scheme (the form rules use)."""
        if self.query is None:
            return f"{self.host}{self.path}"
        return f"{self.host}{self.path}?{self.query}"

    def __str__(self) -> str:
        return self.canonical
