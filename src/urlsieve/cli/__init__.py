"""The ``urlsieve`` command: one module per subcommand, each thin over the library.

Every subcommand module has ``register(subparsers)``, which adds its parser
and sets ``run(args) -> int`` as the default. Exit codes: 0 success,
1 some input was rejected (the rest was processed), 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from urlsieve.cli import (
    canon,
    check,
    console,
    dedup,
    demo,
    doctor,
    explain,
    import_cmd,
    learn,
    serve,
    squid_helper,
)
from urlsieve.cli import compile as compile_cmd
from urlsieve.cli import config as config_cmd
from urlsieve.cli import filter as filter_command
from urlsieve.exceptions import UrlsieveError

__all__ = ["build_parser", "console_main", "main"]

SUBCOMMANDS = (
    demo,
    doctor,
    canon,
    check,
    explain,
    filter_command,
    dedup,
    compile_cmd,
    squid_helper,
    serve,
    console,
    config_cmd,
    import_cmd,
    learn,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="urlsieve",
        description="Fast, bypass-proof URL filtering and de-duplication.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # --version's lines kept
    )
    parser.add_argument("--version", action="version", version=doctor.version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI in-process and return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.run(args)
    except UrlsieveError as exc:
        print(f"urlsieve {args.command}: {exc}", file=sys.stderr)
        return 2
    return status


def console_main() -> None:
    """Entry point of the console script."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = 0
    except KeyboardInterrupt:
        status = 130
    sys.exit(status)
