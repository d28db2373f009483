"""A server (or one cluster primary) killed with SIGKILL during a run, then restarted.

The writer keeps adding batches; while the node is down its adds fail with
StoreUnavailable (BatchInterrupted carries what the server did confirm), and
after the restart every acknowledged URL is still there (AOF, fsync always).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.seen.valkey_fixtures import Cluster, ServerProcess
from urlsieve import StoreUnavailable
from urlsieve.seen import open_seen
from urlsieve.seen.valkey import BatchInterrupted

BATCH = 400  # URLs per add_many call
QUERY = {
    "exact": "&capacity=100000",
    "bloom": "&capacity=100000&error=0.001",
    "dsbf": "&capacity=20000&leaf_bits=262144",  # small leaves: splits happen during the run
}


class Writer(threading.Thread):
    """Adds batch after batch until stopped; records what the server acknowledged."""

    def __init__(self, spec: str) -> None:
        super().__init__(daemon=True)
        self.spec = spec
        self.acknowledged: list[str] = []
        self.new: list[str] = []
        self.errors: list[StoreUnavailable] = []
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.crash: BaseException | None = None

    def wait_for(self, what: Callable[[], bool], timeout: float = 120) -> None:
        with self.progress:
            done = self.progress.wait_for(lambda: what() or self.crash is not None, timeout)
        if self.crash is not None:
            raise AssertionError(f"writer died: {self.crash!r}") from self.crash
        assert done, "writer made no progress"

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            with self.progress:
                self.crash = exc
                self.progress.notify_all()
            raise

    def _run(self) -> None:
        with open_seen(self.spec) as store:
            i = 0
            while not self.stop.is_set() and i < 2000:  # bounded
                batch = [f"http://w{i % 53}.example.org/b{i}/u{j}" for j in range(BATCH)]
                try:
                    flags: list[bool | None] = list(store.add_many(batch))
                except BatchInterrupted as exc:
                    flags = exc.confirmed
                    self.errors.append(exc)
                except StoreUnavailable as exc:
                    flags = [None] * len(batch)
                    self.errors.append(exc)
                with self.progress:
                    self.acknowledged += [
                        u for u, f in zip(batch, flags, strict=True) if f is not None
                    ]
                    self.new += [u for u, f in zip(batch, flags, strict=True) if f]
                    self.progress.notify_all()
                if flags[-1] is not None:
                    i += 1  # a batch that failed is retried under the same URLs


def crash_and_check(spec: str, kill: Callable[[], None], restart: Callable[[], None]) -> Writer:
    writer = Writer(spec)
    writer.start()
    try:
        writer.wait_for(lambda: len(writer.acknowledged) >= 20 * BATCH)
        kill()
        writer.wait_for(lambda: len(writer.errors) >= 1)
        before = len(writer.acknowledged)
        restart()
        writer.wait_for(lambda: len(writer.acknowledged) >= before + 10 * BATCH)
    finally:
        writer.stop.set()
        writer.join(120)
    assert writer.errors, "the client never noticed the node was gone"
    with open_seen(spec) as store:
        assert all(store.contains_many(writer.acknowledged)), "an acknowledged URL was lost"
        if "kind=exact" in spec:
            assert len(set(writer.new)) == len(writer.new)  # never "new" twice
            assert len(store) >= len(writer.new)
    return writer


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["exact", "bloom", "dsbf"])
def test_standalone_server_killed_and_restarted_during_a_run(
    fresh_server: ServerProcess, kind: str
) -> None:
    spec = f"{fresh_server.url}?kind={kind}&prefix=crash&batch=100&retries=2&timeout=2"
    crash_and_check(spec + QUERY[kind], fresh_server.kill, fresh_server.start)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["exact", "dsbf"])
def test_cluster_primary_killed_and_restarted_during_a_run(
    fresh_cluster: Cluster, kind: str
) -> None:
    victim = fresh_cluster.nodes[1]
    spec = f"{fresh_cluster.url}?kind={kind}&prefix=crash&batch=100&retries=4&timeout=2"

    def restart() -> None:
        victim.start()
        fresh_cluster.wait_ok()

    writer = crash_and_check(spec + QUERY[kind], victim.kill, restart)
    assert any(f":{victim.port}" in str(e) or "CLUSTERDOWN" in str(e) for e in writer.errors)
