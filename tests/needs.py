"""What a test needs from the machine: a missing server binary skips the test locally and
fails it under ``CI=true``, where ``.ci/run`` installs every one."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

__all__ = ["chromium", "in_ci", "missing", "system_binary"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(reason: str, *, module: bool = False) -> NoReturn:
    """Skip (locally) or fail (in CI) because something the test needs is not installed.

    ``module=True`` when called at a test module's top level: the whole module is skipped
    (a plain skip there is a collection error that stops the run)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: .ci/run should have installed it)")
    pytest.skip(reason, allow_module_level=module)


def system_binary(name: str) -> str | None:
    """``name`` on PATH, or in the sbin directories a non-root PATH often lacks."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")


def chromium() -> tuple[str, str]:
    """Debian's chromium and its chromedriver (``apt-get install chromium
    chromium-driver``; .ci/run does), for the console's browser tests. Selenium is pointed
    at both, so its Selenium Manager never downloads a browser or a driver."""
    browser = system_binary("chromium")
    driver = system_binary("chromedriver")
    if browser is None or driver is None:
        missing(
            "chromium and chromedriver are not installed: `apt-get install chromium "
            "chromium-driver` (.ci/run does)"
        )
    return browser, driver
