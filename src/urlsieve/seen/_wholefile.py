"""The part the in-memory seed stores share: a table of byte keys, saved as one file.

``buckets`` and ``dsbf`` keep their structure in memory (as the papers do) and
persist it by writing the whole of it to a temporary file that atomically
replaces ``PATH`` on :meth:`~WholeFileStore.flush` and :meth:`~WholeFileStore.close`:
a crash leaves the last flushed table, never a torn one. One process writes a
file at a time (an exclusive lock on ``PATH.lock``); readers open it with
``?readonly=1`` and take no lock. Without a path the store is memory only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from urlsieve.exceptions import StoreClosed, StoreError, StoreReadOnly
from urlsieve.seen.base import ClosingStore
from urlsieve.store.files import os_error, write_atomic, writer_lock
from urlsieve.url import Profile

__all__ = ["KeyTable", "WholeFileStore"]


class KeyTable(Protocol):
    def add(self, key: bytes) -> bool: ...

    def __contains__(self, key: bytes) -> bool: ...

    def __len__(self) -> int: ...


T = TypeVar("T", bound=KeyTable)


class WholeFileStore(ClosingStore, Generic[T]):
    """A seen store over a :class:`KeyTable`; subclasses say how to key, build and (de)serialise."""

    kind = "snapshot"

    def __init__(
        self,
        location: str,
        profile: Profile,
        readonly: bool,
        given: Mapping[str, float | None],
    ) -> None:
        self._profile = profile
        self._path = Path(location) if location else None
        self._readonly = readonly
        self._lock_fd = -1
        self._tlock = threading.Lock()
        self._closed = False
        self._dirty = False
        try:
            if self._path is not None and not readonly:
                self._lock_fd = writer_lock(self._path, self.kind)
            if self._path is not None and self._path.exists():
                try:
                    data = self._path.read_bytes()
                except OSError as exc:
                    raise os_error(exc, self._path, "reading") from exc
                self._table = self._decode(data, str(self._path), given)
            else:
                if readonly:
                    raise StoreError(
                        f"{location or self.kind + ':'}: no {self.kind} store to open read-only"
                    )
                self._table = self._new(given)
                if self._path is not None:
                    self._dirty = True
                    self.flush()  # the file exists from the start, with its profile
        except BaseException:
            self._unlock()
            raise

    # -- what a subclass provides ------------------------------------------------------

    def _key(self, url: str) -> bytes:
        raise NotImplementedError

    def _new(self, given: Mapping[str, float | None]) -> T:
        raise NotImplementedError

    def _decode(self, data: bytes, where: str, given: Mapping[str, float | None]) -> T:
        raise NotImplementedError

    def _encode(self) -> bytes:
        raise NotImplementedError

    # -- the store ---------------------------------------------------------------------

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @property
    def profile(self) -> Profile:
        return self._profile

    def _open(self) -> None:
        if self._closed:
            raise StoreClosed(f"{self.kind} store {self._path or ''} is closed")

    def _writable(self) -> None:
        self._open()
        if self._readonly:
            raise StoreReadOnly(
                f"{self.kind} store {self._path} was opened read-only; "
                "open it without ?readonly=1 to add"
            )

    def add(self, url: str) -> bool:
        key = self._key(url)
        with self._tlock:
            self._writable()
            self._dirty = True
            return self._table.add(key)

    def add_many(self, urls: Iterable[str]) -> list[bool]:
        keys = [self._key(u) for u in urls]  # every URL valid before any is added
        with self._tlock:
            self._writable()
            if keys:
                self._dirty = True
            add = self._table.add
            return [add(k) for k in keys]

    def __contains__(self, url: object) -> bool:
        self._open()
        return isinstance(url, str) and self._key(url) in self._table

    def contains_many(self, urls: Iterable[str]) -> list[bool]:
        self._open()
        table = self._table
        return [self._key(u) in table for u in urls]

    def __len__(self) -> int:
        return len(self._table)

    def flush(self) -> None:
        """Write the table to a temporary file and atomically replace ``PATH`` with it."""
        with self._tlock:
            if self._path is None or self._readonly or self._closed or not self._dirty:
                return
            write_atomic(self._path, self._encode())
            self._dirty = False

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._unlock()
