"""Rules and the list formats they are read from (docs/architecture.md, "Rules")."""

from urlsieve.rules.load import LoadResult, list_files, load_lists
from urlsieve.rules.model import ALLOW, BLOCK, NONE, Rule, RuleKey, parse_rule
from urlsieve.rules.readers import FORMATS, ListReport, read_lines, sniff_format

__all__ = [
    "ALLOW",
    "BLOCK",
    "FORMATS",
    "ListReport",
    "LoadResult",
    "NONE",
    "Rule",
    "RuleKey",
    "list_files",
    "load_lists",
    "parse_rule",
    "read_lines",
    "sniff_format",
]
