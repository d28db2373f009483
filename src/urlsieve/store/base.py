"""The base every store class shares: a store is its own context manager."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["ClosingStore"]


class ClosingStore:
    """Base of the stores: a store is its own context manager, and leaving the block closes it."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
