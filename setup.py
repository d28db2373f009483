"""The compiled accelerator; everything else is in pyproject.toml.

``optional=True``: without a C compiler (or Python's headers) the build goes
on and urlsieve runs on its pure-Python reference code, which gives the same
results, only slower (``urlsieve.url.parse.ACCELERATED`` tells which is in use).

The batch paths that hash (the compiled rule lookup, the seen stores' batches)
need xxHash's header, ``xxhash.h`` (Debian: ``libxxhash-dev``), used header-only:
without it the extension is built without them and those batches run in Python.
``URLSIEVE_XXHASH_INCLUDE`` names another directory holding the header.
"""

import os
import sysconfig
from pathlib import Path

from setuptools import Extension, setup


def _xxhash_include() -> str | None:
    candidates = [
        os.environ.get("URLSIEVE_XXHASH_INCLUDE", ""),
        sysconfig.get_config_var("INCLUDEDIR") or "",
        "/usr/include",
        "/usr/local/include",
        "/opt/homebrew/include",
    ]
    for directory in candidates:
        if directory and (Path(directory) / "xxhash.h").is_file():
            return directory
    return None


include = _xxhash_include()
setup(
    ext_modules=[
        Extension(
            "urlsieve._speedups",
            sources=["src/urlsieve/_speedups.c"],
            include_dirs=[include] if include and include != "/usr/include" else [],
            define_macros=[("URLSIEVE_XXHASH", "1")] if include else [],
            optional=True,
        )
    ]
)
