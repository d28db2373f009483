"""The base of the ``memory:``, ``exact:`` and ``bloom:`` stores: ``add(url)`` and ``url in
store`` one URL at a time (issue 34).

Compiled (``urlsieve._speedups.SeenSingle``, in ``_sp_stores.c``), both are one C call
with no Python frame: the URL's compiled key and the store's probe (the set's, or the
lock-free add or lookup of ``exact_add_locked`` / ``bloom_add_locked``, the same C
functions), with what the probe needs bound by the store (:meth:`_seen_bind`) whenever
it opens or maps its file, and unbound when it unmaps or closes. Whatever the C call
leaves (not an exact ``str``, nothing bound, a URL off the compiled path, a probe that
leaves the add to the Python session) goes to the store's Python methods, the same ones
the reference below calls for every URL: ``_add_slow(url)`` / ``_contains_slow(url)``,
or, with the key made, ``add_fingerprint(key)`` / ``contains_fingerprint(key)`` (and,
for an add that overlapped a locked section, exact's ``_add_locked(key, True)`` or
Bloom's ``_redo(layer, h1, h2)``).

:class:`SeenSinglePy` is the reference (and the base without the extension): each call
is the store's Python method. ``tests/seen/test_one_url.py`` holds the two equal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from urlsieve._accel import speedups
from urlsieve.fingerprint import key_arguments
from urlsieve.url import Profile

__all__ = ["KIND_BLOOM", "KIND_EXACT", "KIND_MEMORY", "SeenBase", "SeenSinglePy", "bind_key"]

#: What :meth:`SeenSinglePy._seen_bind` binds (``_sp_stores.c``'s ``SEEN_*``).
KIND_MEMORY, KIND_EXACT, KIND_BLOOM = 1, 2, 3


class SeenSinglePy:
    """``add`` and ``in`` as the store's Python methods (the compiled base's reference)."""

    __slots__ = ()

    def add(self, url: str) -> bool:
        """Add ``url``; True when it was not seen before (for Bloom kinds: not reported seen)."""
        return self._add_slow(url)

    def __contains__(self, url: object) -> bool:
        return self._contains_slow(url)

    def _add_slow(self, url: str) -> bool:
        raise NotImplementedError

    def _contains_slow(self, url: object) -> bool:
        raise NotImplementedError

    def _seen_bind(self, key: tuple[bool, bool, Any] | None, *target: Any) -> None:
        """What the compiled ``add`` and ``in`` probe (nothing to bind here)."""


def bind_key(profile: Profile) -> tuple[bool, bool, Any] | None:
    """The compiled key's arguments under ``profile``
    (:func:`urlsieve.fingerprint.key_arguments`), or None when no compiled ``add``/``in``
    can take it (no extension, or a profile off the compiled path)."""
    return None if _compiled is None else key_arguments(profile)


_compiled = getattr(speedups, "SeenSingle", None)
if TYPE_CHECKING:
    SeenBase = SeenSinglePy
else:
    SeenBase = _compiled or SeenSinglePy
