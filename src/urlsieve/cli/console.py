"""``urlsieve console hash-password``: the ``console.password_hash`` of a password."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from urlsieve.console.auth import hash_password
from urlsieve.exceptions import ConfigError

MIN_PASSWORD = 12


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "console",
        help="the admin console's tools (hash-password)",
        description="Tools for the admin console that `urlsieve serve` serves at /console/.",
    )
    actions = p.add_subparsers(dest="console_command", metavar="ACTION", required=True)
    h = actions.add_parser(
        "hash-password",
        help="print the console.password_hash line of a password (scrypt)",
        description=(
            "Read a password (asked twice on a terminal; one line on standard input "
            "otherwise) and print the [console] line to put in the config file."
        ),
    )
    h.set_defaults(run=run_hash)


def _read() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("console password: ")
        if getpass.getpass("again: ") != first:
            raise ConfigError("the passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def run_hash(args: argparse.Namespace) -> int:
    password = _read()
    if len(password) < MIN_PASSWORD:
        raise ConfigError(f"the password is shorter than {MIN_PASSWORD} characters")
    print(f'password_hash = "{hash_password(password)}"')
    return 0
