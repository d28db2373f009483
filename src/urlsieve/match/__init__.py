"""Matching engines behind one ``Matcher`` protocol (docs/architecture.md, "The rule engine").

- :class:`SnapshotMatcher` — the production engine: the compiled rule format, in memory or
  memory-mapped from a snapshot file, behind every :class:`~urlsieve.Filter`;
- :class:`HashMatcher` — the reference engine (dict tables keyed by lookup expressions), the
  readable specification the compiled engine is held equal to;
- :class:`SegmentedTable` — the seed patent's segmented table, with its own semantics;
- :class:`DecompositionTree` — the URL decomposition tree the patent compares itself against.
"""

from urlsieve.match.base import Explanation, Matcher, Verdict, better, resolve_rules
from urlsieve.match.hashed import HashMatcher
from urlsieve.match.segmented import SegmentedTable
from urlsieve.match.snapshot import SnapshotMatcher
from urlsieve.match.tree import DecompositionTree

__all__ = [
    "DecompositionTree",
    "Explanation",
    "HashMatcher",
    "Matcher",
    "SegmentedTable",
    "SnapshotMatcher",
    "Verdict",
    "better",
    "resolve_rules",
]
