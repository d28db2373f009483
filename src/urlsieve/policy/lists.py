"""The small list files a policy names: ``iplist`` (one address, network or range a line)
and ``userlist`` (``user`` or ``user:comment`` a line), ``#`` comments; shared by the
squidGuard.conf reader and the TOML reader."""

from __future__ import annotations

from pathlib import Path

from urlsieve.policy.clients import AddressSyntaxError, parse_address
from urlsieve.policy.model import PolicyError

__all__ = ["list_tokens", "read_addresses", "read_users"]


def list_tokens(path: str) -> list[tuple[int, str]]:
    """``(line number, token)`` of each line with something before its ``#``."""
    try:
        text = Path(path).read_text("utf-8", "surrogateescape")
    except OSError as exc:
        raise PolicyError(f"cannot read ({exc.strerror or exc})", path) from None
    out = []
    for number, raw in enumerate(text.split("\n"), 1):
        token = raw.split("#", 1)[0].strip()
        if token:
            out.append((number, token))
    return out


def read_addresses(path: str) -> list[tuple[int, int, int]]:
    """An iplist file's entries (see :func:`~urlsieve.policy.clients.parse_address`);
    a bad line is a :class:`PolicyError` at ``path:line``."""
    out = []
    for number, token in list_tokens(path):
        try:
            out.append(parse_address(token))
        except AddressSyntaxError as exc:
            raise PolicyError(str(exc), f"{path}:{number}") from None
    return out


def read_users(path: str) -> set[str]:
    """A userlist file's user names, lower-cased (``user:comment`` lines keep ``user``)."""
    return {token.split(":", 1)[0].lower() for _number, token in list_tokens(path)}
