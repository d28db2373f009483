"""Matching engines behind one ``Matcher`` protocol (docs/architecture.md, "The rule engine").

- :class:`HashMatcher` — the production matcher (hash tables keyed by lookup expressions);
- :class:`SegmentedTable` — the seed patent's segmented table, with its own semantics;
- :class:`DecompositionTree` — the URL decomposition tree the patent compares itself against.
"""

from urlsieve.match.base import Explanation, Matcher, Verdict, better, resolve_rules
from urlsieve.match.hashed import HashMatcher
from urlsieve.match.segmented import SegmentedTable
from urlsieve.match.tree import DecompositionTree

__all__ = [
    "DecompositionTree",
    "Explanation",
    "HashMatcher",
    "Matcher",
    "SegmentedTable",
    "Verdict",
    "better",
    "resolve_rules",
]
