"""Category names as people type them: matched without regard to case, with a "did you
mean" for a name that matches none.

A category is a list directory's name (``gambling``), a phrase list's header
(``#listcategory: "Gambling"``), a policy's destination, a ``--categories`` choice. They
are compared case-insensitively everywhere a name is looked up (:func:`resolve`), and an
unknown one is refused with the nearest known names (:func:`did_you_mean`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean", "resolve"]


def resolve(name: str, known: Iterable[str]) -> str | None:
    """The known category ``name`` means: itself when known, else the one equal to it
    ignoring case (the first in sorted order when several are), else None."""
    names = sorted(set(known))
    if name in names:
        return name
    folded = name.casefold()
    return next((known_name for known_name in names if known_name.casefold() == folded), None)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x' or 'y'?)`` for the known names nearest ``name``, or ""."""
    names = sorted(set(known))
    by_fold = {n.casefold(): n for n in names}
    close = difflib.get_close_matches(name.casefold(), list(by_fold), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(by_fold[c]) for c in close) + "?)"
