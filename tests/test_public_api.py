"""The public API is curated: one sorted __all__, every name importable, nothing leaking."""

from __future__ import annotations

import importlib
import subprocess
import sys

import urlsieve
from urlsieve import exceptions

EXPECTED = {
    "CRAWLER",
    "FILTER",
    "URL",
    "ConfigError",
    "Explanation",
    "Filter",
    "InvalidURL",
    "Profile",
    "ProfileMismatch",
    "ResolveError",
    "Rule",
    "RuleSyntaxError",
    "SnapshotError",
    "StoreClosed",
    "StoreCorrupt",
    "StoreError",
    "StoreFull",
    "StoreReadOnly",
    "StoreUnavailable",
    "UrlsieveError",
    "Verdict",
    "__version__",
    "canonicalize",
    "crawler_profile",
    "lookup_expressions",
    "parse_rule",
    "parse_url",
}


def test_all_is_sorted_and_unique() -> None:
    assert urlsieve.__all__ == sorted(set(urlsieve.__all__))


def test_all_is_exactly_the_public_api() -> None:
    assert set(urlsieve.__all__) >= EXPECTED
    for name in urlsieve.__all__:
        assert hasattr(urlsieve, name), name
    public = {n for n in vars(urlsieve) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(urlsieve, n)).__name__ == "module"}
    assert public - modules == set(urlsieve.__all__) - {"__version__"}


def test_subpackage_all_names_exist() -> None:
    for module_name in (
        "urlsieve.url",
        "urlsieve.exceptions",
        "urlsieve.rules",
        "urlsieve.match",
        "urlsieve.seen",
        "urlsieve.neardup",
    ):
        module = importlib.import_module(module_name)
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert hasattr(module, name), f"{module_name}.{name}"


def test_exception_hierarchy() -> None:
    assert issubclass(exceptions.InvalidURL, exceptions.UrlsieveError)
    assert issubclass(exceptions.InvalidURL, ValueError)
    assert issubclass(exceptions.RuleSyntaxError, ValueError)
    for cls in (
        exceptions.StoreCorrupt,
        exceptions.StoreClosed,
        exceptions.ProfileMismatch,
        exceptions.StoreReadOnly,
        exceptions.StoreFull,
        exceptions.StoreUnavailable,
    ):
        assert issubclass(cls, exceptions.StoreError)
    for cls in (exceptions.QueueCorrupt, exceptions.QueueUnavailable, exceptions.SpoolCorrupt):
        assert issubclass(cls, exceptions.LearnError)
    assert issubclass(exceptions.LearnError, exceptions.UrlsieveError)
    assert str(exceptions.SpoolCorrupt("spool/a.warc.gz", "torn")) == "spool/a.warc.gz: torn"
    assert issubclass(exceptions.ResolveError, exceptions.UrlsieveError)
    assert not issubclass(exceptions.ResolveError, exceptions.StoreError)
    err = exceptions.RuleSyntaxError("empty host", "lists/ads/urls", 1042)
    assert str(err) == "lists/ads/urls:1042: empty host"


def test_import_does_no_io_and_loads_no_suffix_list() -> None:
    code = (
        "import sys, urlsieve; "
        "print('publicsuffixlist' in sys.modules and "
        "urlsieve.url.expressions.suffix_list.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() in ("False", "0")
