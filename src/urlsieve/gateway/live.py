"""A long-running process's current rule set, replaced on SIGHUP or on a file change.

:class:`LiveRules` holds the loaded object (a :class:`urlsieve.Filter`, usually
opened from a compiled snapshot) and swaps in a new one between two requests:
the new one is loaded and validated first, then one reference assignment makes
it current, so no request sees a half-loaded rule set and none is dropped. A
failed reload — whatever the error — keeps the old rules and is logged; the next
change is tried again.

One change is not a reload: a watched file rewritten or truncated *in place*
(same inode, another size or time: ``cp new.snap live.snap``, ``truncate``)
changes the memory-mapped rules under the process's feet, so they are dropped
at once (:meth:`LiveRules.get` raises :class:`NoRules` and the failure mode
answers) until a file loads again. Snapshots are replaced by rename.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Generic, TypeVar

from urlsieve._notify import ChangeNotice
from urlsieve.exceptions import NoRules, UrlsieveError

__all__ = ["LiveRules", "NoRules", "file_signature"]

T_co = TypeVar("T_co", covariant=True)

FileSignature = tuple[int, int, int, int]
#: One entry per watched file (None: the file does not exist).
Signature = tuple[FileSignature | None, ...]


def file_signature(path: str) -> FileSignature | None:
    """``(device, inode, size, mtime_ns)`` of ``path``, or None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _signature(paths: Sequence[str]) -> Signature | None:
    """The watched files' signatures; None when the first (the rules) does not exist."""
    signature = tuple(file_signature(path) for path in paths)
    return None if not signature or signature[0] is None else signature


def _changed_in_place(a: Signature | None, b: Signature | None) -> bool:
    """Whether the rules file (the first watched) is one file (device and inode) in both,
    with another content. The other files are the loader's to check (a learned overlay
    changed in place is reopened, never a reason to drop the base rules)."""
    if a is None or b is None or a[0] is None or b[0] is None:
        return False
    return a[0][:2] == b[0][:2] and a[0] != b[0]


@dataclass(frozen=True)
class _Loaded(Generic[T_co]):
    rules: T_co
    signature: Signature | None
    loaded_at: float  # time.time()
    load_seconds: float
    generation: int


class LiveRules(Generic[T_co]):
    """The current rules; call :meth:`poll` between requests and :meth:`get` for each.

    ``load`` builds the rules (it may raise anything: the error is logged, the old
    rules stay, and the load is retried on the next change or signal). ``watch`` is a
    file whose change triggers a reload (checked at most every ``check_seconds``; 0
    checks at every poll), or several: the rules first, then files that may come and go
    (a learned overlay). A loader with an ``invalidate()`` method is told when a reload
    is asked for explicitly (SIGHUP, :meth:`reload`), so it drops what it caches.

    ``notify``: files whose writer bumps a change counter beside them
    (:mod:`urlsieve._notify`, the learned overlay): each :meth:`poll` reads the counters
    (one ``pread`` each) and checks the files at once when one moved, so a learned rule
    applies from the next request, not after ``check_seconds``.
    """

    def __init__(
        self,
        load: Callable[[], T_co],
        *,
        watch: str | Sequence[str] | None = None,
        check_seconds: float = 1.0,
        log: Callable[[str], None] = lambda _msg: None,
        clock: Callable[[], float] = time.monotonic,
        notify: Sequence[str] = (),
    ) -> None:
        self._load = load
        self._watch: tuple[str, ...] = (
            () if watch is None else (watch,) if isinstance(watch, str) else tuple(watch)
        )
        self._check_seconds = check_seconds
        self._notices = tuple(ChangeNotice(path) for path in notify)
        self._log = log
        self._clock = clock
        self._current: _Loaded[T_co] | None = None
        self._error: str | None = None
        self._failed_signature: Signature | None = None
        self._requested = False
        self._next_check = 0.0
        self._generation = 0
        self.reloads = 0
        self.failed_reloads = 0
        self._reload("start")

    # -- state ---------------------------------------------------------------

    def get(self) -> T_co:
        """The current rules, or :class:`NoRules` with the reason none are loaded."""
        current = self._current
        if current is None:
            raise NoRules(self._error or "no rules loaded")
        return current.rules

    @property
    def loaded(self) -> bool:
        return self._current is not None

    @property
    def error(self) -> str | None:
        """Why the last load failed (None after a success)."""
        return self._error

    @property
    def loaded_at(self) -> float | None:
        """Wall-clock time (``time.time()``) the current rules were loaded."""
        return None if self._current is None else self._current.loaded_at

    @property
    def load_seconds(self) -> float | None:
        return None if self._current is None else self._current.load_seconds

    @property
    def generation(self) -> int:
        """1 for the first successful load, +1 for each successful reload (0: none)."""
        return 0 if self._current is None else self._current.generation

    # -- reloading -----------------------------------------------------------

    def request_reload(self) -> None:
        """Ask for a reload at the next :meth:`poll` (safe to call from a signal handler)."""
        self._requested = True

    def install_sighup(self, *also: Callable[[], None]) -> None:
        """Reload on SIGHUP (main thread only); ``also``: called too (reopen logs)."""

        def handler(_signum: int, _frame: FrameType | None) -> None:
            self.request_reload()
            for call in also:
                call()

        signal.signal(signal.SIGHUP, handler)

    def poll(self) -> bool:
        """Reload when asked to, when the watched file changed, or to retry after a failure.

        Returns True when new rules were swapped in.
        """
        if self._requested:
            self._requested = False
            return self._reload("SIGHUP")
        now = self._clock()
        moved = [n.changed() for n in self._notices]  # each read, so each is up to date
        if any(moved):
            self._next_check = now  # a writer said so: check the files now
        if now < self._next_check:
            return False
        self._next_check = now + self._check_seconds
        if not self._watch:
            return False
        signature = _signature(self._watch)
        if signature is None or signature == self._failed_signature:
            return False
        current = self._current
        if current is not None and signature == current.signature:
            return False
        if current is not None and _changed_in_place(signature, current.signature):
            self._drop(f"{self._watch[0]} was changed in place (replace snapshots by rename)")
        return self._reload("file change" if current is not None else "retry")

    def reload(self) -> bool:
        """Reload now; True on success (the old rules stay on failure)."""
        return self._reload("request")

    def _drop(self, why: str) -> None:
        """Stop using the current rules: they can no longer be trusted."""
        self._current = None
        self._error = why
        self._log(f"rules dropped: {why}; the failure mode answers until a reload succeeds")

    def _reload(self, why: str) -> bool:
        signature = _signature(self._watch)
        invalidate = getattr(self._load, "invalidate", None)
        if why in ("SIGHUP", "request") and callable(invalidate):
            invalidate()
        started = time.perf_counter()
        try:
            rules = self._load()
        except Exception as exc:  # any error: the old rules stay (the failure mode if none)
            self._error = f"{type(exc).__name__}: {exc}"
            # A bad file is tried again when it changes; anything else (a bug, a transient
            # error) at the next check.
            self._failed_signature = signature if isinstance(exc, UrlsieveError | OSError) else None
            if why != "start":
                self.failed_reloads += 1
            keeping = "keeping the previous rules" if self._current else "no rules loaded"
            self._log(f"reload ({why}) failed, {keeping}: {self._error}")
            return False
        elapsed = time.perf_counter() - started
        self._generation += 1
        self._current = _Loaded(rules, signature, time.time(), elapsed, self._generation)
        self._error = None
        self._failed_signature = None
        if why != "start":
            self.reloads += 1
        self._log(f"rules loaded ({why}) in {elapsed * 1000:.1f} ms, generation {self._generation}")
        return True
