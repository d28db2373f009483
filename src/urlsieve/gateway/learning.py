"""The service's one hook for reviewing what the gateway learned: a narrow protocol.

``urlsieve serve`` hands :func:`urlsieve.service.app.create_app` an object of this
shape (:class:`urlsieve.learn.admin.LearnAdmin`) when the config has a ``[learn]``
section with the learner's directory, so the ``/v1/learn/*`` endpoints can list, show,
override and forget learned verdicts while the gateway package never imports
:mod:`urlsieve.learn`.

The contract every implementation keeps:

* methods are blocking (they read and write files): the service calls them in a
  worker thread, never on the event loop;
* a verdict is a JSON-ready ``dict`` (``key``, ``host``, ``action``, ``category``,
  ``source``, ``score``, ``evidence``, ``url``, ``note``, times…);
* input the lists cannot hold (no usable host, a top-level domain, a bad category or
  note) raises a :class:`ValueError` (:class:`~urlsieve.exceptions.InvalidURL`,
  :class:`~urlsieve.exceptions.RuleSyntaxError`) saying why; the service answers 422;
* a verdict store or overlay that cannot be read or written raises
  :class:`~urlsieve.exceptions.LearnError`; the service answers 503;
* every write (:meth:`LearnReview.override`, :meth:`LearnReview.forget`) rebuilds the
  overlay snapshot before it returns, so the gateway's reloader finds the new one.
"""

from __future__ import annotations

import builtins
from typing import Any, Protocol

__all__ = ["ACTIONS", "SOURCES", "LearnReview"]

#: What an override does.
ACTIONS = ("allow", "block")
#: Where a verdict comes from, weakest first (``?source=`` of ``GET /v1/learn/verdicts``;
#: the learner's verdict store keeps these).
SOURCES = ("learned", "redirect", "override")


class LearnReview(Protocol):
    """Review and override the learned verdicts (see the module's contract)."""

    def list(
        self, source: str | None, action: str | None, limit: int, offset: int
    ) -> builtins.list[dict[str, Any]]:
        """Up to ``limit`` verdicts from ``offset`` (ordered by host, then rule), of one
        ``source`` and one ``action`` when given."""
        ...

    def show(self, url: str) -> dict[str, Any] | None:
        """The verdict deciding ``url`` (its page's rule, else its host's), or None when
        nothing is learned about it."""
        ...

    def override(self, url: str, action: str, category: str, note: str) -> dict[str, Any]:
        """Allow or block ``url`` (a bare host name: the whole host) whatever is learned;
        the stored override (its verdict dict) with ``overlay_rules`` and
        ``overlay_seconds`` of the rebuild."""
        ...

    def forget(self, url: str) -> bool:
        """Drop what was learned (or overridden) for ``url``'s rule; False when there was
        nothing. The overlay is rebuilt either way."""
        ...

    def close(self) -> None:
        """Release the store (the owner calls it once the service has stopped)."""
        ...
