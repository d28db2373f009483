"""Lint, formatting and strict typing are part of the test suite (STYLE.md §15)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = ["src", "tests", "benchmarks"]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    "cmd",
    [
        ("ruff", "check", *TREES),
        ("ruff", "format", "--check", *TREES),
    ],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(cmd: tuple[str, ...]) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    proc = _run(ruff, *cmd[1:])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_on_the_package() -> None:
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
