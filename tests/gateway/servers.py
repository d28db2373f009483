"""Real servers for the gateway tests: an origin web server and Squid, on loopback.

Squid drops its privileges to ``cache_effective_user`` (``proxy`` on Debian)
when started as root, and runs the helpers as that user. A clone under
``/root`` or a pytest ``tmp_path`` (mode 0700) is unreadable for it, so the
helper runs from a *staged runtime*: a world-readable temporary directory with
a copy of the urlsieve package and its run-time dependencies, and a small
wrapper script that starts it with the same Python.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.needs import missing, system_binary

RUNTIME_PACKAGES = ("urlsieve", "xxhash", "idna", "publicsuffixlist", "numpy")
SQUID_USER = "proxy"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def squid_binary() -> str:
    """The squid binary; in CI (``CI=true``) a missing squid fails, locally it skips."""
    found = system_binary("squid")
    if found is None:
        missing("squid is not installed: install it with `apt-get install squid` (.ci/run does)")
    return found


# -- origin ------------------------------------------------------------------------------


@dataclass
class Origin:
    port: int
    hits: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def origin_server() -> Iterator[Origin]:
    """A web server answering ``200 origin <Host> <path>`` to every GET, recording the paths."""
    origin = Origin(port=0)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            origin.hits.append(f"{self.headers.get('Host')}{self.path}")
            body = f"origin {self.headers.get('Host')} {self.path}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as port:
        origin.port = port
        yield origin


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> Iterator[int]:
    """``handler`` served on ``host`` (a loopback address) by a threading server; yields
    its port."""
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


# -- staged runtime ----------------------------------------------------------------------


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot find package {name}")
    return Path(next(iter(spec.submodule_search_locations)))


def make_world_readable(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o755)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            p = os.path.join(root, name)
            os.chmod(p, 0o755 if os.access(p, os.X_OK) else 0o644)


def _runs_as_squid_user(python: str) -> bool:
    """Whether the Squid user can start ``python`` and it has this interpreter's version."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    cmd = [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    as_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        as_user = {"user": SQUID_USER, "group": SQUID_USER, "extra_groups": []}
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=30, check=False, cwd="/", **as_user
        )
    except OSError:
        return False
    return proc.returncode == 0 and proc.stdout.strip() == want


def _copy_interpreter(directory: Path) -> tuple[str, str]:
    """Copy this Python (binary, shared library, standard library) when the Squid user
    cannot reach it (e.g. pyenv under /root); returns (python, environment assignments)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    home = directory / "python"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / f"python{version}"
    shutil.copy2(os.path.realpath(sys.executable), binary)
    (home / "lib").mkdir()
    for so in Path(sys.base_prefix, "lib").glob(f"libpython{version}*.so*"):
        shutil.copy2(so, home / "lib" / so.name)
    skip = shutil.ignore_patterns(
        "site-packages",
        "test",
        "tests",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "config-*",
        "__pycache__",
    )
    shutil.copytree(
        Path(sys.base_prefix, "lib", f"python{version}"),
        home / "lib" / f"python{version}",
        ignore=skip,
    )
    return str(binary), f"PYTHONHOME={home} LD_LIBRARY_PATH={home / 'lib'} "


def stage_runtime(directory: Path) -> Path:
    """Copy urlsieve and its dependencies under ``directory``; return the wrapper script.

    The interpreter is this one when the Squid user can run it, else the system Python
    of the same version, else a copy of this one (``URLSIEVE_TEST_COPY_PYTHON=1`` forces
    the copy).
    """
    lib = directory / "lib"
    lib.mkdir(parents=True)
    for name in RUNTIME_PACKAGES:
        source = _package_dir(name)
        shutil.copytree(source, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
        libs = source.parent / f"{name}.libs"  # shared libraries a wheel keeps beside it
        if libs.is_dir():
            shutil.copytree(libs, lib / libs.name)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        os.path.realpath(sys.executable),
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    if os.environ.get("URLSIEVE_TEST_COPY_PYTHON"):
        candidates = []
    python = next((c for c in candidates if os.path.exists(c) and _runs_as_squid_user(c)), None)
    env = ""
    if python is None:
        python, env = _copy_interpreter(directory)
    wrapper = directory / "urlsieve"
    wrapper.write_text(
        f'#!/bin/sh\n{env}PYTHONPATH={lib} exec {python} -s -B -m urlsieve "$@"\n',
        encoding="utf-8",
    )
    make_world_readable(directory)
    os.chmod(wrapper, 0o755)
    return wrapper


def world_readable_tempdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    return path


# -- squid -------------------------------------------------------------------------------


@dataclass
class Squid:
    process: subprocess.Popen[bytes]
    directory: Path
    rewrite_port: int
    acl_port: int

    def cache_log(self) -> str:
        path = self.directory / "cache.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def access_log(self) -> str:
        path = self.directory / "access.log"
        return path.read_text("utf-8", "replace") if path.exists() else ""

    def helper_pids(self) -> list[int]:
        """Processes started by Squid whose command line runs ``urlsieve squid-helper``."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                status = (entry / "status").read_text()
            except OSError:
                continue
            ppid = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")))
            if ppid == self.process.pid and b"squid-helper" in cmdline:
                pids.append(int(entry.name))
        return pids


def request(
    proxy_port: int, url: str, *, timeout: float = 20.0
) -> tuple[int, dict[str, str], bytes]:
    """GET ``url`` through the proxy (absolute URI, redirects not followed)."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=timeout)
    try:
        conn.putrequest("GET", url, skip_host=True, skip_accept_encoding=True)
        host = url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body
    finally:
        conn.close()


def raw_request(
    proxy_port: int, target: bytes, host: str, *, timeout: float = 20.0
) -> tuple[int, dict[str, str]]:
    """GET ``target`` (any bytes, as a hostile client sends them) through the proxy."""
    head = b"GET " + target + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\n"
    head += b"Connection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout) as sock:
        sock.sendall(head)
        received = bytearray()
        while b"\r\n\r\n" not in received and (chunk := sock.recv(65536)):
            received += chunk
    status_line, *header_lines = bytes(received).split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers


SQUID_CONF = """\
http_port 127.0.0.1:{rewrite_port} name=rewrite
http_port 127.0.0.1:{acl_port} name=acl
pid_filename none
cache_log {dir}/cache.log
logformat urlsieve %ts.%03tu %>a %rm %ru %>Hs tag=%et log=%ea
access_log stdio:{dir}/access.log urlsieve
cache deny all
cache_mem 4 MB
coredump_dir {dir}
netdb_filename none
hosts_file {dir}/hosts
dns_nameservers 127.0.0.1
shutdown_lifetime 0 seconds
forwarded_for delete
{user_line}

acl via_acl myportname acl
acl via_rewrite myportname rewrite
acl localclient src 127.0.0.1/32

external_acl_type urlsieve_acl ttl=0 negative_ttl=0 children-max={children} \
children-startup={children} concurrency={concurrency} %>ru %>a %un %>rm \
{wrapper} squid-helper --config {config} --mode acl
acl urlsieve_blocked external urlsieve_acl
http_access deny via_acl urlsieve_blocked
http_access allow localclient
http_access deny all

url_rewrite_program {wrapper} squid-helper --config {config}
url_rewrite_children {children} startup={children} idle=1 concurrency={concurrency}
url_rewrite_access allow via_rewrite
url_rewrite_access deny all
"""


@contextlib.contextmanager
def running_squid(
    wrapper: Path,
    config: Path,
    directory: Path,
    hosts: dict[str, str],
    *,
    children: int = 3,
    concurrency: int = 8,
    probe_url: str,
) -> Iterator[Squid]:
    """Start Squid in the foreground with a generated config; wait until it answers."""
    binary = squid_binary()
    rewrite_port, acl_port = free_port(), free_port()
    as_root = os.geteuid() == 0
    (directory / "hosts").write_text(
        "".join(f"{ip} {name}\n" for name, ip in hosts.items()), encoding="utf-8"
    )
    conf = directory / "squid.conf"
    conf.write_text(
        SQUID_CONF.format(
            rewrite_port=rewrite_port,
            acl_port=acl_port,
            dir=directory,
            user_line=f"cache_effective_user {SQUID_USER}" if as_root else "",
            children=children,
            concurrency=concurrency,
            wrapper=wrapper,
            config=config,
        ),
        encoding="utf-8",
    )
    if as_root:
        user = pwd.getpwnam(SQUID_USER)
        for path in (directory, *directory.iterdir()):
            if path.name != "runtime":
                os.chown(path, user.pw_uid, user.pw_gid)
    check = subprocess.run(
        [binary, "-k", "parse", "-f", str(conf)], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        raise RuntimeError(f"squid rejects the generated config:\n{check.stderr}")
    with open(directory / "squid.stderr", "wb") as stderr:
        process = subprocess.Popen(
            [binary, "-N", "-f", str(conf)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    squid = Squid(process, directory, rewrite_port, acl_port)
    try:
        _wait_ready(squid, probe_url)
        yield squid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_ready(squid: Squid, probe_url: str, attempts: int = 120) -> None:
    """Poll until both ports answer the probe through their helpers (Squid starts in seconds)."""
    last = ""
    for _ in range(attempts):
        if squid.process.poll() is not None:
            raise RuntimeError(
                f"squid exited with {squid.process.returncode}:\n"
                + (squid.directory / "squid.stderr").read_text("utf-8", "replace")
                + squid.cache_log()
            )
        try:
            statuses = [
                request(port, probe_url, timeout=5)[0]
                for port in (squid.rewrite_port, squid.acl_port)
            ]
            if statuses == [200, 200]:
                return
            last = f"probe answered {statuses}"
        except OSError as exc:
            last = repr(exc)
        time.sleep(0.25)
    raise RuntimeError(f"squid did not become ready ({last}):\n{squid.cache_log()[-4000:]}")
