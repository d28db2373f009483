"""Moved: the console's pages are :mod:`urlsieve.service.console` (they are part of the
lookup service). Every name is importable from here for one release, forwarded on use.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import urlsieve.service.console

    try:
        return getattr(urlsieve.service.console, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
