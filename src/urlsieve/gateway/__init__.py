"""At the gateway: the Squid helper, the HTTP lookup service and their configuration.

- :mod:`urlsieve.gateway.protocol` — Squid's helper line protocols;
- :mod:`urlsieve.gateway.squid` — the helper (decisions, failure mode, stdin/stdout loop);
- :mod:`urlsieve.gateway.live` — the current rules of a process, reloaded on SIGHUP/change;
- :mod:`urlsieve.gateway.config` — the TOML configuration and its environment overrides;
- :mod:`urlsieve.gateway.service` — the Starlette lookup service (``service`` extra).
"""

from urlsieve.gateway.config import FailureMode, GatewayConfig, load_config
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
