"""Moved: the lookup service is :mod:`urlsieve.service` (:mod:`urlsieve.service.app`).

Every name this module had is importable from here for one release, forwarded on first
use (the gateway itself does not import the service).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import urlsieve.service.app

    try:
        return getattr(urlsieve.service.app, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
