"""A whole gateway for the console's browser tests: a real Squid whose ``urlsieve
squid-helper`` children write the decision stream, ``urlsieve serve`` (the block pages and
the console) as its own process, the learner's verdict store and overlay, and Debian's
chromium driven by Selenium (pointed at the system browser and driver: Selenium Manager
never runs)."""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.gateway.servers import (
    Origin,
    Squid,
    free_port,
    make_world_readable,
    origin_server,
    running_squid,
    squid_binary,
    stage_runtime,
    world_readable_tempdir,
)
from tests.needs import chromium
from urlsieve.console.auth import hash_password
from urlsieve.learn.overlay import build_overlay
from urlsieve.learn.verdicts import Learned, VerdictStore, rule_key

PASSWORD = "correct horse battery staple"
TOKEN = "console-token-0123456789"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
#: Learned before the gateway starts (the learner's verdicts): blocked until overridden.
LEARNED = (
    ("http://casino.test/", "gambling", 91, (("jackpot", 30, 3), ("roulette", 31, 1))),
    ("http://games.test/", "games", 64, (("cheat codes", 32, 2),)),
)
HOSTS = ("origin.test", "evil.test", "casino.test", "games.test")


@dataclass
class Gateway:
    directory: Path
    squid: Squid
    origin: Origin
    service: subprocess.Popen[bytes]
    port: int
    config: Path
    stream: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.origin.port}{path}"

    def service_log(self) -> str:
        return (self.directory / "serve.log").read_text("utf-8", "replace")


def write_config(directory: Path, state: Path, *, session_minutes: float = 30) -> Path:
    lists = directory / "lists" / "malware"
    lists.mkdir(parents=True)
    (lists / "domains").write_text("evil.test\n", encoding="utf-8")
    snapshot = directory / "base.snap"
    from urlsieve import Filter

    Filter.from_lists([directory / "lists"]).save(snapshot)
    config = directory / "urlsieve.toml"
    config.write_text(
        f"""
[rules]
snapshot = "{snapshot}"

[squid]
mode = "redirect"
redirect_url = "http://127.0.0.1:{{port}}/block?url=%u&category=%c&client=%a"
reload_check_seconds = 0.1

[service]
token = "{TOKEN}"

[learn]
queue = "sqlite:{state / "queue.db"}"
unknown = "allow"
overlay = "{state / "learned.snap"}"
directory = "{state}"
promote_after = 0

[console]
decision_log = "{directory / "stream" / "decisions.jsonl"}"
password_hash = "{hash_password(PASSWORD)}"
session_minutes = {session_minutes}
reviews = "{state / "reviews.db"}"
""",
        encoding="utf-8",
    )
    return config


def learn_verdicts(state: Path) -> None:
    with VerdictStore(state / "verdicts.db") as store:
        now = time.time()
        store.put(
            [
                Learned(
                    *rule_key(url),
                    "block",
                    category,
                    "learned",
                    score=score,
                    evidence=evidence,
                    url=url,
                    first_seen=now - 90,
                    decided_at=now - 30,
                )
                for url, category, score, evidence in LEARNED
            ]
        )
        build_overlay(store, state / "learned", state / "learned.snap", promote_after=0)


def wait_for_service(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"urlsieve serve exited:\n{log.read_text('utf-8', 'replace')}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise RuntimeError(f"urlsieve serve did not start:\n{log.read_text('utf-8', 'replace')}")


@contextlib.contextmanager
def serve(
    config: Path, port: int, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "urlsieve",
                "serve",
                "--config",
                str(config),
                "--bind",
                f"127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        wait_for_service(port, process, log)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def running_gateway() -> Iterator[Gateway]:
    squid_binary()
    chromium()
    directory = world_readable_tempdir("urlsieve-console-")
    try:
        wrapper = stage_runtime(directory / "runtime")
        state = directory / "state"
        state.mkdir()
        (directory / "stream").mkdir()
        config = write_config(directory, state)
        port = free_port()
        config.write_text(config.read_text("utf-8").replace("{port}", str(port)), "utf-8")
        learn_verdicts(state)
        stream = directory / "stream" / "decisions.jsonl"
        stream.touch()
        make_world_readable(directory)
        # Squid's helpers (the proxy user) append to the stream; the service (us) too.
        os.chmod(directory / "stream", 0o777)
        os.chmod(stream, 0o666)
        with origin_server() as origin, serve(config, port, directory / "serve.log") as service:
            hosts = dict.fromkeys(HOSTS, "127.0.0.1")
            with running_squid(
                wrapper,
                config,
                directory,
                hosts,
                children=2,
                concurrency=4,
                probe_url=f"http://origin.test:{origin.port}/probe",
            ) as squid:
                yield Gateway(directory, squid, origin, service, port, config, stream)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def browser(proxy_port: int) -> Any:
    """Headless chromium through the Squid at ``proxy_port`` (loopback addresses, the
    service's, go direct), with its console log kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium()
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download anything
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def shoot(driver: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.get_screenshot_as_file(str(SCREENSHOTS / f"{name}.png"))


def csp_violations(driver: Any) -> list[str]:
    """The browser console's messages about the Content-Security-Policy (or any error)."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if "Content Security Policy" in entry["message"]
        or "Refused to" in entry["message"]
        or (entry.get("level") == "SEVERE" and "favicon" not in entry["message"])
    ]
