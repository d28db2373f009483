"""A real DNS server on loopback for the tests: dnsmasq answering from its own hosts file.

``dnsmasq`` (Debian ``dnsmasq-base``, installed by ``.ci/run``) listens on
127.0.0.1 on a free port, answers only from a hosts file in a temp directory
(``--no-resolv --no-hosts``: nothing leaves the machine), and is authoritative
for ``.test`` so unknown names get NXDOMAIN at once. :meth:`DnsServer.set_hosts`
rewrites the file and reloads it (SIGHUP), waiting until the server answers
with the new generation, so a test can change DNS under a running crawl.
Without the binary the tests skip with the install hint, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.needs import missing, system_binary

INSTALL_HINT = "no dnsmasq binary: apt-get install dnsmasq-base (or set URLSIEVE_DNSMASQ)"
GENERATION = "generation.urlsieve.test"  # answers 127.0.9.<n> after the n-th set_hosts


def dnsmasq_binary() -> str:
    binary = os.environ.get("URLSIEVE_DNSMASQ") or system_binary("dnsmasq")
    if binary is None:
        missing(INSTALL_HINT)
    return binary


class ManualClock:
    """A clock the test moves (``clock.now += 2``), for resolvers' TTLs."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def free_udp_and_tcp_port() -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind(("127.0.0.1", 0))
            port: int = udp.getsockname()[1]
            with socket.socket() as tcp:
                try:
                    tcp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port for dnsmasq")


@dataclass
class DnsServer:
    port: int
    hosts_file: Path
    process: subprocess.Popen[bytes]
    log: Path
    generation: int = 0
    table: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        return f"dns://127.0.0.1:{self.port}"

    def _write(self) -> None:
        lines = [f"127.0.9.{self.generation % 250} {GENERATION}"]
        for host, addresses in self.table.items():
            lines += [f"{address} {host}" for address in addresses]
        tmp = self.hosts_file.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.hosts_file)

    def set_hosts(self, table: Mapping[str, str | Iterable[str]]) -> None:
        """Serve exactly ``table`` (name → address or addresses) from now on."""
        self.table = {
            host: (addresses,) if isinstance(addresses, str) else tuple(addresses)
            for host, addresses in table.items()
        }
        self.generation += 1
        self._write()
        self.process.send_signal(signal.SIGHUP)
        self._wait_for(f"127.0.9.{self.generation % 250}")

    def _wait_for(self, address: str) -> None:
        import dns.resolver

        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = ["127.0.0.1"]
        resolver.port = self.port
        resolver.lifetime = 0.5
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dnsmasq exited: {self.log.read_text()[-2000:]}")
            try:
                answer = resolver.resolve(GENERATION, "A")
                if any(r.to_text() == address for r in answer):
                    return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"dnsmasq did not answer in time: {self.log.read_text()[-2000:]}")


def start_dnsmasq(directory: Path, table: Mapping[str, str | Iterable[str]]) -> DnsServer:
    binary = dnsmasq_binary()
    directory.mkdir(parents=True, exist_ok=True)
    hosts = directory / "hosts"
    log = directory / "dnsmasq.log"
    port = free_udp_and_tcp_port()
    user = "root" if os.geteuid() == 0 else getpass.getuser()
    args = [
        binary,
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        f"--port={port}",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--no-resolv",
        "--no-hosts",
        f"--addn-hosts={hosts}",
        "--local=/test/",  # authoritative for .test: unknown names are NXDOMAIN
        "--local-ttl=1",  # answers live one second: tests see DNS changes quickly
        "--cache-size=0",
        f"--user={user}",
        "--pid-file=",
        "--log-facility=-",
    ]
    DnsServer(port, hosts, None, log)._write()  # type: ignore[arg-type]
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    server = DnsServer(port, hosts, process, log)
    try:
        server._wait_for("127.0.9.0")  # before this, a SIGHUP would kill it
        server.set_hosts(table)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return server


@pytest.fixture
def dns_server(tmp_path: Path) -> Iterator[DnsServer]:
    server = start_dnsmasq(tmp_path / "dns", {})
    try:
        yield server
    finally:
        server.process.terminate()
        try:
            server.process.wait(10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()
