"""``python -m urlsieve``: the command line (same as the ``urlsieve`` script)."""

from urlsieve.cli import console_main

console_main()
