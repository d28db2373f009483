"""The compiled accelerator ``urlsieve._speedups``, when it is built and not turned off.

``pip install`` builds it where a C compiler and Python's headers are present;
``URLSIEVE_PURE_PYTHON=1`` in the environment turns it off. Every compiled
function has a pure-Python reference next to its caller, which the tests
hold it equal to.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["speedups"]

speedups: ModuleType | None = None
if not os.environ.get("URLSIEVE_PURE_PYTHON"):
    try:
        from urlsieve import _speedups as speedups
    except ImportError:  # built without a C compiler: the references serve
        speedups = None
