"""Prometheus metrics of the lookup service, in the text exposition format (0.0.4).

No client library: a few counters and one histogram, rendered on request. Every
label value comes from a bounded set (endpoints and methods are mapped to ``other``
by the caller and here; categories come from the loaded rules, not from requests).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["CONTENT_TYPE", "LATENCY_BUCKETS", "METHODS", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: HTTP methods counted under their own name; any other is counted as ``other``, so
#: a client cannot create a label value (and a time series) per request.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

#: Upper bounds (seconds) of the latency histogram's buckets.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, str]) -> str:
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Histogram:
    __slots__ = ("count", "counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds
        self.count += 1


class Metrics:
    """Counters of requests and decisions, and a latency histogram per endpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.seen_ops: Counter[tuple[str, str]] = Counter()
        self.policy: Counter[tuple[str, str, str]] = Counter()
        self._latency: dict[str, _Histogram] = {}
        self.started = time.time()

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        """Count and time one request; ``endpoint`` must come from a bounded set."""
        method = method if method in METHODS else "other"
        with self._lock:
            self.requests[(endpoint, method, status)] += 1
            hist = self._latency.get(endpoint)
            if hist is None:
                hist = self._latency[endpoint] = _Histogram()
            hist.observe(seconds)

    def count_decisions(self, decisions: Iterable[tuple[str, str]]) -> None:
        """Count ``(action, category)`` pairs (category ``-`` when there is none)."""
        with self._lock:
            self.decisions.update(decisions)

    def count_policy(self, decisions: Iterable[tuple[str, str, str]]) -> None:
        """Count ``(source, acl, action)`` of policy decisions (names from the policy)."""
        with self._lock:
            self.policy.update(decisions)

    def count_seen(self, op: str, results: Iterable[bool]) -> None:
        with self._lock:
            for flag in results:
                self.seen_ops[(op, "true" if flag else "false")] += 1

    def render(self, rules: Mapping[str, float | str | None], reloads: Mapping[str, int]) -> str:
        """The exposition text.

        ``rules`` describes the loaded rule set (see the service); ``reloads`` counts
        the reloads since start by result (``ok``, ``failed``), whatever started them.
        """
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")

        with self._lock:
            family(
                "urlsieve_http_requests_total", "counter", "HTTP requests by endpoint and status"
            )
            for (endpoint, method, status), n in sorted(self.requests.items()):
                labels = _labels({"endpoint": endpoint, "method": method, "status": str(status)})
                out.append(f"urlsieve_http_requests_total{labels} {n}")
            family("urlsieve_decisions_total", "counter", "URL decisions by action and category")
            for (action, category), n in sorted(self.decisions.items()):
                labels = _labels({"action": action, "category": category})
                out.append(f"urlsieve_decisions_total{labels} {n}")
            if self.policy:
                family(
                    "urlsieve_policy_decisions_total",
                    "counter",
                    "Policy decisions by source, ACL and action (pass, block, rewrite)",
                )
                for (source, acl, action), n in sorted(self.policy.items()):
                    labels = _labels({"source": source, "acl": acl, "action": action})
                    out.append(f"urlsieve_policy_decisions_total{labels} {n}")
            family("urlsieve_seen_total", "counter", "Seen-store answers by operation and result")
            for (op, result), n in sorted(self.seen_ops.items()):
                out.append(f"urlsieve_seen_total{_labels({'op': op, 'result': result})} {n}")
            family(
                "urlsieve_reloads_total",
                "counter",
                "Rule reloads (file change, SIGHUP, API) by result",
            )
            for result, n in sorted(reloads.items()):
                out.append(f"urlsieve_reloads_total{_labels({'result': result})} {n}")
            family(
                "urlsieve_http_request_duration_seconds",
                "histogram",
                "Time to answer an HTTP request, by endpoint",
            )
            for endpoint, hist in sorted(self._latency.items()):
                cumulative = 0
                for bound, n in zip((*LATENCY_BUCKETS, float("inf")), hist.counts, strict=True):
                    cumulative += n
                    le = "+Inf" if bound == float("inf") else _number(bound)
                    labels = _labels({"endpoint": endpoint, "le": le})
                    out.append(
                        f"urlsieve_http_request_duration_seconds_bucket{labels} {cumulative}"
                    )
                labels = _labels({"endpoint": endpoint})
                out.append(f"urlsieve_http_request_duration_seconds_sum{labels} {hist.sum!r}")
                out.append(f"urlsieve_http_request_duration_seconds_count{labels} {hist.count}")
        family("urlsieve_rules_loaded", "gauge", "1 when a rule set is loaded, 0 when not")
        out.append(f"urlsieve_rules_loaded {1 if rules.get('loaded_at') is not None else 0}")
        family("urlsieve_rules_generation", "gauge", "Successful rule loads since start")
        out.append(f"urlsieve_rules_generation {rules.get('generation') or 0}")
        loaded_at = rules.get("loaded_at")
        if isinstance(loaded_at, float):
            family("urlsieve_rules_loaded_timestamp_seconds", "gauge", "When the rules were loaded")
            out.append(f"urlsieve_rules_loaded_timestamp_seconds {loaded_at!r}")
        created = rules.get("created")
        if isinstance(created, float):
            family(
                "urlsieve_snapshot_age_seconds",
                "gauge",
                "Seconds since the loaded snapshot was compiled",
            )
            out.append(f"urlsieve_snapshot_age_seconds {max(0.0, time.time() - created):.3f}")
        family(
            "urlsieve_snapshot_info",
            "gauge",
            "The loaded rule set: snapshot version (content id), format version, rule count",
        )
        info = {
            "version": str(rules.get("version") or "-"),
            "format": str(rules.get("format") or "-"),
            "rules": str(rules.get("rules") if rules.get("rules") is not None else "-"),
        }
        out.append(f"urlsieve_snapshot_info{_labels(info)} 1")
        return "\n".join(out) + "\n"
