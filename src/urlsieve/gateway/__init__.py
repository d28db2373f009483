"""At the gateway: the Squid helper, the HTTP lookup service and their configuration.

- :mod:`urlsieve.gateway.protocol` — Squid's helper line protocols;
- :mod:`urlsieve.gateway.squid` — the helper (decisions, failure mode, stdin/stdout loop);
- :mod:`urlsieve.gateway.live` — the current rules of a process, reloaded on SIGHUP/change;
- :mod:`urlsieve.gateway.config` — the gateway's options (read by :mod:`urlsieve.config`);
- the HTTP lookup service built on these parts is :mod:`urlsieve.service`.
"""

from typing import Any

from urlsieve.gateway.config import FailureMode, GatewayConfig
from urlsieve.gateway.live import LiveRules, NoRules
from urlsieve.gateway.protocol import HelperMode, ProtocolError
from urlsieve.gateway.squid import HelperSettings, SquidHelper

__all__ = [
    "FailureMode",
    "GatewayConfig",
    "HelperMode",
    "HelperSettings",
    "LiveRules",
    "NoRules",
    "ProtocolError",
    "SquidHelper",
    "load_config",
]


def __getattr__(name: str) -> Any:
    if name == "load_config":  # the assembly room's reader, importable from here too
        from urlsieve.config import load_config

        return load_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
