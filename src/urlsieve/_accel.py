"""The compiled accelerator ``urlsieve._speedups``, when it is built and not turned off.

``pip install`` builds it where a C compiler and Python's headers are present, with
every compiled path (nothing else is needed: its hash is urlsieve's own);
``URLSIEVE_PURE_PYTHON=1`` in the environment turns it off. Every compiled function has a
pure-Python reference next to its caller, which the tests hold it equal to.

:func:`report` says which build is in use: the compiled paths present and missing, the
SIMD scan chosen, and the command that fixes what is missing (``urlsieve doctor``,
``urlsieve --version``, and the one line the Squid helper, the service and ``learn run``
write at start on a slow path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["COMPILED_PATHS", "Acceleration", "report", "slow_path_message", "speedups"]

#: Every function of a full build, with the work it speeds up (the report's words).
COMPILED_PATHS: dict[str, str] = {
    "fast_canonical": "canonical URLs (scan)",
    "canonical_rewrite": "near-canonical URLs (rewrite)",
    "url_parts": "parse_url",
    "canonical_hashes": "URL fingerprints (batch)",
    "bloom_test": "bloom: lookups",
    "bloom_insert": "bloom: inserts",
    "bloom_urls": "bloom: batches of URLs",
    "exact_lookup": "exact: lookups",
    "exact_insert": "exact: inserts",
    "url_key": "one URL's fingerprint (crawler query too)",
    "exact_add_locked": "exact: one add / lookup",
    "bloom_add_locked": "bloom: one add / lookup",
    "store_session": "exact/bloom: locked sections beside lock-free adds",
    "SeenSingle": "memory/exact/bloom: one add / in in one call",
    "table_place": "snapshot tables (compile)",
    "compile_lines": "list reading (compile)",
    "snapshot_match": "rule lookup (match_many)",
    "snapshot_verdicts": "verdicts without rules (check_many)",
    "snapshot_checker": "one URL's verdict (Filter.check)",
    "policy_decide": "policy batches (pass-list walk)",
    "snapshot_rules": "rule records",
    "squid_scan": "Squid request lines",
    "squid_reply": "Squid replies (helper)",
    "filter_reply": "urlsieve filter output",
    "quote_all": "block-page URL quoting",
    "scan_mode": "SIMD scan selection",
    "xxh3_64": "XXH3-64",
    "xxh3_128": "XXH3-128",
    "simhash_text": "SimHash of a text",
    "simhash_tokens": "SimHash of tokens",
    "simhash_str": "SimHash of a text that is not ASCII",
    "features_text": "SimHash features (exact check)",
    "nd_jaccard": "Jaccard of features (exact check)",
    "nd_jaccard_many": "Jaccard of candidates (exact check)",
    "nd_build": "near-duplicate tables (build)",
    "nd_query": "near-duplicate lookups",
}

_FIX_COMPILER = (
    "install a C compiler and Python's headers (Debian/Ubuntu: apt-get install gcc "
    "python3-dev; Fedora: dnf install gcc python3-devel; macOS: xcode-select --install), "
    "then reinstall urlsieve from source: pip install --force-reinstall --no-deps "
    "--no-binary urlsieve urlsieve (from a clone: pip install --force-reinstall --no-deps ., "
    "or pip install -e . for an editable install)"
)
_FIX_STALE = (
    "the extension is from another urlsieve build or Python: reinstall it: pip install "
    "--force-reinstall --no-deps --no-cache-dir urlsieve (from a clone: pip install "
    "--force-reinstall --no-deps ., or pip install -e . for an editable install)"
)


def _load() -> tuple[ModuleType | None, str | None, str | None]:
    """The compiled module, or None with why and what fixes it."""
    if os.environ.get("URLSIEVE_PURE_PYTHON"):
        return None, "turned off by URLSIEVE_PURE_PYTHON", "unset URLSIEVE_PURE_PYTHON"
    try:
        from urlsieve import _speedups
    except ImportError as exc:  # built without a C compiler: the references serve
        here = os.path.dirname(os.path.abspath(__file__))
        if any(
            n.startswith("_speedups.") and n.endswith((".so", ".pyd")) for n in os.listdir(here)
        ):
            return None, f"cannot be loaded ({exc})", _FIX_STALE  # another Python's build
        return None, "not built: the install had no C compiler or no Python headers", _FIX_COMPILER
    return _speedups, None, None


#: without the extension: why, and what fixes it
_loaded, _why_not, _fix_not = _load()
if TYPE_CHECKING:
    # Typed by its stub (_speedups.pyi), so every call is checked against the signatures;
    # at run time it may be None, and every caller checks.
    from urlsieve import _speedups as speedups
else:
    speedups = _loaded


@dataclass(frozen=True)
class Acceleration:
    """Which build of urlsieve's hot paths is in use."""

    #: the extension is loaded
    loaded: bool
    #: compiled functions of a full build that this build has, and those it lacks
    present: tuple[str, ...]
    missing: tuple[str, ...]
    #: the canonical scan in use (``avx512``, ``sse2`` or ``bytes``), None without the extension
    scan: str | None
    #: the extension's file, or why it is not loaded
    where: str
    #: what to do to get the full build, None when it is in use
    fix: str | None

    @property
    def full(self) -> bool:
        """Every compiled path is in use."""
        return self.loaded and not self.missing

    def summary(self) -> str:
        """The engine in one line (``urlsieve --version``, the benchmarks' build line)."""
        if self.full:
            return f"full compiled engine ({len(self.present)} paths), scan {self.scan}"
        if self.loaded:
            return f"PARTIAL compiled engine, lacks {', '.join(self.missing)}"
        return f"NO compiled engine: {self.where}"

    def slow_path(self) -> str | None:
        """The one line a long-running program logs at start on a slow path, else None."""
        if self.full:
            return None
        if not self.loaded:
            what = f"the compiled engine is not in use ({self.where})"
        else:
            what = f"the compiled engine lacks {', '.join(self.missing)}"
        return f"slow path: {what}; to fix: {self.fix}"

    def lines(self) -> list[str]:
        """The report as text lines (``urlsieve doctor``)."""
        if not self.loaded:
            head = f"compiled engine: NOT IN USE: {self.where}; every path runs pure Python"
        elif self.missing:
            head = (
                f"compiled engine: PARTIAL ({len(self.present)} of {len(COMPILED_PATHS)} "
                f"paths): {self.where}"
            )
        else:
            head = f"compiled engine: full ({len(self.present)} paths): {self.where}"
        out = [head]
        if self.scan is not None:
            out.append(f"canonical scan: {self.scan}")
        for name in self.present:
            out.append(f"  compiled  {name:18} {COMPILED_PATHS[name]}")
        for name in self.missing:
            out.append(f"  PYTHON    {name:18} {COMPILED_PATHS[name]}")
        if self.fix is not None:
            out.append(f"to fix: {self.fix}")
        return out


def report() -> Acceleration:
    """The build in use, read off the loaded module (nothing is built or imported anew)."""
    if speedups is None:
        why, fix = _why_not or "not built", _fix_not or _FIX_COMPILER
        return Acceleration(False, (), tuple(COMPILED_PATHS), None, why, fix)
    present = tuple(name for name in COMPILED_PATHS if hasattr(speedups, name))
    missing = tuple(name for name in COMPILED_PATHS if not hasattr(speedups, name))
    scan = speedups.scan_mode() if hasattr(speedups, "scan_mode") else None
    where = str(getattr(speedups, "__file__", "urlsieve._speedups"))
    return Acceleration(True, present, missing, scan, where, _FIX_STALE if missing else None)


def slow_path_message() -> str | None:
    """:meth:`Acceleration.slow_path` of the build in use."""
    return report().slow_path()
