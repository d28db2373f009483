"""A real E2Guardian (Debian's 5.3) on loopback, the oracle of the classifier's scoring.

:func:`e2guardian_proxy` copies the packaged configuration (``/etc/e2guardian``) into a
temporary directory, points every path at the copy, replaces the three phrase lists by
the given ones (copied, with their ``.Include<>`` paths made absolute: E2Guardian reads
them relative to its working directory), sets the naughtiness limit and the weighted
phrase mode, and runs ``e2guardian -N`` (foreground) on a free port of 127.0.0.1. As root
it stays root (``daemonuser``); every file is world-readable in case it drops privileges.

A missing binary calls :func:`tests.needs.missing`: skipped locally, failed under CI.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.needs import missing, system_binary

__all__ = ["E2Guardian", "e2guardian_proxy"]

PACKAGED_CONFIG = Path("/etc/e2guardian")
_INCLUDE = re.compile(rb"^\.Include<([^>]*)>", re.M | re.I)


@dataclass(frozen=True)
class E2Guardian:
    port: int
    root: Path

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """The access log so far (written asynchronously: may lag the responses)."""
        path = self.root / "access.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _copy_lists(source: Path, target: Path) -> None:
    """Copy a directory of phrase lists, making relative ``.Include<>`` paths absolute."""
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()

        def absolute(match: re.Match[bytes], here: Path = path.parent) -> bytes:
            name = match.group(1).decode()
            return b".Include<" + str(here / name).encode() + b">"

        path.write_bytes(_INCLUDE.sub(absolute, data))


def _set(conf: str, key: str, value: str) -> str:
    """Set ``key = value`` in an E2Guardian config text (replacing a live or commented
    line, else appending one)."""
    pattern = re.compile(rf"^#?\s*{key}\s*=.*$", re.M)
    line = f"{key} = {value}"
    if pattern.search(conf):
        return pattern.sub(lambda _m: line, conf, count=1)
    return conf + f"\n{line}\n"


@contextlib.contextmanager
def e2guardian_proxy(
    lists: Path,
    *,
    weighted: str = "weightedphraselist",
    banned: str = "bannedphraselist",
    exception: str = "exceptionphraselist",
    limit: int = 50,
    weighted_phrase_mode: int = 2,
) -> Iterator[E2Guardian]:
    """Run E2Guardian on 127.0.0.1 with the phrase lists of directory ``lists`` (file
    names relative to it); direct to the origin (no parent proxy)."""
    binary = system_binary("e2guardian")
    if binary is None or not PACKAGED_CONFIG.is_dir():
        missing("e2guardian is not installed (apt-get install e2guardian)")
    with tempfile.TemporaryDirectory(prefix="urlsieve-e2g-") as tmp:
        root = Path(tmp)
        etc = root / "etc"
        shutil.copytree(PACKAGED_CONFIG, etc)
        for path in etc.rglob("*"):
            if path.is_file():
                text = path.read_bytes().replace(b"/etc/e2guardian", str(etc).encode())
                path.write_bytes(text)
        _copy_lists(lists, root / "phrases")
        for name, listed in (
            ("weightedphraselist", weighted),
            ("bannedphraselist", banned),
            ("exceptionphraselist", exception),
        ):
            (etc / "lists" / name).write_text(f".Include<{root / 'phrases' / listed}>\n")
        port = _free_port()
        main = (etc / "e2guardian.conf").read_text()
        for key, value in (
            ("filterip", "127.0.0.1"),
            ("filterports", str(port)),
            ("transparenthttpsport", str(_free_port())),
            ("nodaemon", "on"),
            ("dockermode", "off"),
            ("loglocation", f"'{root / 'access.log'}'"),
            ("pidfilename", f"'{root / 'e2guardian.pid'}'"),
            ("httpworkers", "20"),
            ("weightedphrasemode", str(weighted_phrase_mode)),
        ):
            main = _set(main, key, value)
        if os.geteuid() == 0:
            main = _set(main, "daemonuser", "'root'")
            main = _set(main, "daemongroup", "'root'")
        (etc / "e2guardian.conf").write_text(main)
        group = (etc / "e2guardianf1.conf").read_text()
        (etc / "e2guardianf1.conf").write_text(_set(group, "naughtynesslimit", str(limit)))
        for path in (root, *root.rglob("*")):
            path.chmod(path.stat().st_mode | 0o755 if path.is_dir() else 0o644)
        output = root / "e2guardian.out"
        with output.open("wb") as out:
            process = subprocess.Popen(
                [binary, "-N", "-c", str(etc / "e2guardian.conf")],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"e2guardian exited with {process.returncode}: "
                        + output.read_text("utf-8", "replace")[-2000:]
                    )
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), timeout=0.5),
                ):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("e2guardian did not listen within 30 s")
                time.sleep(0.1)
            yield E2Guardian(port, root)
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
