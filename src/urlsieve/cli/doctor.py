"""``urlsieve doctor``: which build of the hot paths is in use, and how to get the full one.

It lists the compiled paths in use and those running on the pure-Python reference, the
SIMD scan chosen at import, and the command that fixes what is missing. Exit status 0 on
the full compiled build, 1 on a slow path (so a deployment check can insist on speed).
"""

from __future__ import annotations

import argparse
import platform
import sys
from typing import Any

from urlsieve import __version__
from urlsieve._accel import report

__all__ = ["register", "run", "version_text"]


def version_text() -> str:
    """``urlsieve --version``: the version, Python, and the engine in use on one screen."""
    state = report()
    engine = state.summary() + ("" if state.full else " (urlsieve doctor)")
    python = f"Python {platform.python_version()} ({sys.implementation.name}, {platform.machine()})"
    return f"urlsieve {__version__}\n{python}\n{engine}"


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="say which build of the hot paths is in use, and how to get the compiled one",
        description=(
            "List the compiled paths in use, those running on the pure-Python reference, "
            "the SIMD scan chosen, and the command that fixes what is missing. Exit status "
            "0 on the full compiled build, 1 on a slow path."
        ),
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    state = report()
    print(f"urlsieve {__version__} on Python {platform.python_version()} ({platform.machine()})")
    for line in state.lines():
        print(line)
    return 0 if state.full else 1
