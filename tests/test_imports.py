"""Every module imports on its own in a fresh interpreter: no import cycle hides behind the
order in which the package happens to load its modules."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import urlsieve

OPTIONAL = ("urlsieve.integrations.scrapy", "urlsieve.gateway.service", "urlsieve.seen.valkey")


def _modules() -> list[str]:
    names = [urlsieve.__name__]
    for info in pkgutil.walk_packages(urlsieve.__path__, prefix="urlsieve."):
        if info.name != "urlsieve.__main__":  # runs the command line when imported
            names.append(info.name)
    return sorted(names)


def _import_alone(name: str) -> tuple[str, int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"], capture_output=True, text=True, check=False
    )
    return name, proc.returncode, proc.stderr[-2000:]


def test_every_module_imports_first_in_a_fresh_interpreter() -> None:
    modules = _modules()
    assert len(modules) > 50  # the walk found the package, not an empty directory
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(_import_alone, modules))
    failed = [
        (name, err)
        for name, code, err in results
        if code != 0 and not (name.startswith(OPTIONAL) and "ModuleNotFoundError" in err)
    ]
    assert not failed, failed
