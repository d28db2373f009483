"""Which build is in use is never a secret: ``urlsieve doctor`` and ``--version`` list the
compiled paths, the scan and the fix; the Squid helper, the service and ``learn run`` say
so in one line at start when they run on a slow path; ``ACCELERATED`` is True only for a
full build."""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.gateway.servers import free_port
from tests.learn.origin import PAGES, Origin, origin_server
from tests.learn.test_learner import host_of, offer, write_config
from urlsieve import _accel
from urlsieve.cli import main
from urlsieve.url import parse

SAMPLE = Path(_accel.__file__).parent / "data" / "sample-lists"


def _partial() -> SimpleNamespace:
    """An extension of an older build: the scan, without the hashing batches."""
    real = _accel.speedups
    keep = ("fast_canonical", "canonical_rewrite", "url_parts", "scan_mode")
    return SimpleNamespace(
        __file__="/old/_speedups.so", **{k: getattr(real, k, None) for k in keep}
    )


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_accel, "speedups", None)
    monkeypatch.setattr(_accel, "_why_not", "not built (no module named urlsieve._speedups)")


def test_a_full_build_reports_every_path(capsys: pytest.CaptureFixture[str]) -> None:
    state = _accel.report()
    if not state.loaded:
        pytest.skip("the extension is not built here: the full report cannot be checked")
    assert state.full and parse.ACCELERATED
    assert set(state.present) == set(_accel.COMPILED_PATHS) and state.fix is None
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "compiled engine: full" in out and f"canonical scan: {state.scan}" in out
    assert "PYTHON" not in out and "to fix" not in out
    for name in _accel.COMPILED_PATHS:
        assert f"compiled  {name}" in out


def test_a_partial_build_is_not_accelerated_and_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if _accel.speedups is None:
        pytest.skip("the extension is not built here")
    monkeypatch.setattr(_accel, "speedups", _partial())
    state = _accel.report()
    assert state.loaded and not state.full
    assert "snapshot_match" in state.missing and "squid_reply" in state.missing
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "compiled engine: PARTIAL" in out and "PYTHON    bloom_urls" in out
    assert "to fix: the extension is from another urlsieve build" in out
    assert "pip install --force-reinstall" in out


def test_no_extension_names_the_fix(slow: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "compiled engine: NOT IN USE" in out
    assert "apt-get install gcc python3-dev" in out and "--no-binary urlsieve" in out
    assert not _accel.report().full


def test_version_names_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("urlsieve ") and lines[1].startswith("Python ")
    state = _accel.report()
    assert lines[2] == state.summary() + ("" if state.full else " (urlsieve doctor)")


def test_pure_python_is_reported_by_a_new_process() -> None:
    env = {**os.environ, "URLSIEVE_PURE_PYTHON": "1"}
    code = "from urlsieve.url import parse; print(parse.ACCELERATED)"
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "False"
    done = subprocess.run(
        [sys.executable, "-m", "urlsieve", "doctor"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "turned off by URLSIEVE_PURE_PYTHON" in done.stdout
    assert "to fix: unset URLSIEVE_PURE_PYTHON" in done.stdout


def test_the_helper_says_once_at_start_that_it_runs_on_a_slow_path() -> None:
    """A real helper process on the reference code: one line on stderr, answers unchanged."""
    env = {**os.environ, "URLSIEVE_PURE_PYTHON": "1"}
    argv = [sys.executable, "-m", "urlsieve", "squid-helper", "--lists", str(SAMPLE)]
    argv += ["--mode", "acl"]
    lines = b"".join(f"{k} http://example-tracker.test/x\n".encode() for k in range(50))
    done = subprocess.run(argv, input=lines, check=False, env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(b' OK tag="ads"') == 50  # the ACL matches: blocked
    err = done.stderr.decode()
    assert err.count("slow path") == 1, err
    assert "turned off by URLSIEVE_PURE_PYTHON" in err.splitlines()[0]
    # and silent on the full build
    if _accel.report().full:
        env.pop("URLSIEVE_PURE_PYTHON")
        done = subprocess.run(
            argv, input=lines, check=False, env=env, capture_output=True, timeout=120
        )
        assert done.stdout.count(b' OK tag="ads"') == 50
        assert b"slow path" not in done.stderr


def test_the_service_says_it_at_start(
    slow: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "rules.snap"
    assert main(["compile", "--lists", str(SAMPLE), "-o", str(snapshot)]) == 0
    capsys.readouterr()
    store = f"exact:{tmp_path / 'missing' / 'dir' / 'seen.exact'}"  # fails at start-up
    argv = ["serve", "--snapshot", str(snapshot), "--seen-store", store, "--bind"]
    assert main([*argv, f"127.0.0.1:{free_port()}", "--log-level", "critical"]) == 2
    err = capsys.readouterr().err
    assert err.count("slow path") == 1
    assert err.startswith("urlsieve serve: slow path: the compiled engine is not in use")


def test_learn_run_says_it_at_start(
    slow: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    origin: Origin
    with origin_server() as origin:
        conf = write_config(tmp_path, origin)
        page = next(iter(PAGES))
        offer(conf, [f"http://{host_of(page)}:{origin.port}{page}"])
        assert main(["learn", "--config", str(conf), "run", "--until-idle"]) == 0
    err = capsys.readouterr().err
    assert err.count("slow path") == 1
    assert err.startswith("urlsieve learn: slow path: the compiled engine is not in use")


def test_an_install_without_the_extension_says_it_was_not_built(tmp_path: Path) -> None:
    """The package as an install without a C compiler leaves it (no _speedups*.so): the
    doctor says why in words, names the fix, exits 1, and the helper still answers."""
    package = Path(_accel.__file__).parent
    shutil.copytree(package, tmp_path / "urlsieve", ignore=shutil.ignore_patterns("*.so"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("URLSIEVE_PURE_PYTHON", None)
    doctor = [sys.executable, "-m", "urlsieve", "doctor"]
    done = subprocess.run(doctor, check=False, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT IN USE: not built: the install had no C compiler or no Python headers" in (
        done.stdout
    )
    assert "apt-get install gcc python3-dev" in done.stdout
    helper = [sys.executable, "-m", "urlsieve", "squid-helper", "--lists", str(SAMPLE)]
    done = subprocess.run(
        [*helper, "--mode", "acl"],
        check=False,
        env=env,
        capture_output=True,
        input=b"3 http://example-tracker.test/x\n",
        timeout=120,
    )
    assert done.stdout.startswith(b'3 OK tag="ads"'), done.stderr
    assert done.stderr.count(b"slow path: the compiled engine is not in use (not built") == 1


def test_an_extension_that_cannot_be_loaded_is_named_with_its_fix(tmp_path: Path) -> None:
    """A _speedups file that will not load (another Python's, damaged) is not "not built"."""
    package = Path(_accel.__file__).parent
    shutil.copytree(package, tmp_path / "urlsieve", ignore=shutil.ignore_patterns("*.so"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / "urlsieve" / f"_speedups{suffix}").write_bytes(b"not an ELF file")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("URLSIEVE_PURE_PYTHON", None)
    doctor = [sys.executable, "-m", "urlsieve", "doctor"]
    done = subprocess.run(doctor, check=False, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT IN USE: cannot be loaded (" in done.stdout
    assert "to fix: the extension is from another urlsieve build or Python" in done.stdout
