"""The assembly room: the configuration file read once, and turned into running parts.

- :mod:`urlsieve.config.model` — :func:`read_config`: one reader of the TOML file, one
  typed model (:class:`Config`), one casting style, one rule for relative paths (the
  file's directory), the ``URLSIEVE_*`` environment overrides;
- :mod:`urlsieve.config.rules` — reading rules: the one decision between a compiled
  snapshot and the lists, and the category selection;
- :mod:`urlsieve.config.assemble` — a configuration turned into the rules or the policy
  engine (with their reloads), the stores and the learner's hooks;
- :mod:`urlsieve.config.describe` — what a configuration will do, in words.

The command line, the Squid helper, the HTTP service and the Scrapy integration build
what they run here, and import nothing from each other.
"""

from urlsieve.config.assemble import (
    LayeredLoader,
    base_loader,
    burst_gate,
    configured_category_names,
    configured_rules,
    filter_loader,
    learn_admin,
    open_learn_admin,
    open_seen_store,
    policy_loader,
    rules_loader,
    rules_notify,
    rules_source,
    rules_watch,
    unknown_feed,
)
from urlsieve.config.describe import describe
from urlsieve.config.model import (
    ENV_VARS,
    LEARN_OPTIONS,
    OPTIONS,
    Config,
    learn_settings,
    load_config,
    read_config,
    read_policy,
)
from urlsieve.config.rules import (
    check_selection,
    compile_lists,
    load_selected,
    open_rules,
    open_snapshot,
    snapshot_selection,
    snapshot_to_open,
)
from urlsieve.gateway.config import FailureMode, GatewayConfig, parse_bind

__all__ = [
    "ENV_VARS",
    "LEARN_OPTIONS",
    "OPTIONS",
    "Config",
    "FailureMode",
    "GatewayConfig",
    "LayeredLoader",
    "base_loader",
    "burst_gate",
    "check_selection",
    "compile_lists",
    "configured_category_names",
    "configured_rules",
    "describe",
    "filter_loader",
    "learn_admin",
    "learn_settings",
    "load_config",
    "load_selected",
    "open_learn_admin",
    "open_rules",
    "open_seen_store",
    "open_snapshot",
    "parse_bind",
    "policy_loader",
    "read_config",
    "read_policy",
    "rules_loader",
    "rules_notify",
    "rules_source",
    "rules_watch",
    "snapshot_selection",
    "snapshot_to_open",
    "unknown_feed",
]
