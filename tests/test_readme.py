"""The README's Python examples run as written (issue 9, item 11: they failed when pasted).

``>>>`` blocks run as doctests in a temporary directory (an example may create the small
files it reads); plain blocks are executed there. The Valkey block runs against the real
Valkey fixture: its server address and prefix are swapped for the fixture's, nothing else.
The Scrapy settings blocks are executed, and every class they name must import.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
from pathlib import Path

import pytest

from tests.seen.valkey_fixtures import ServerProcess, unique_prefix

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", README.read_text("utf-8"), re.M | re.S)


def _ids() -> list[str]:
    return [f"block{i}-{block.splitlines()[0][:30]}" for i, block in enumerate(BLOCKS)]


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("block", BLOCKS, ids=_ids())
def test_readme_example_runs(
    block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    monkeypatch.chdir(tmp_path)
    if block.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block, {}, "README", str(README), 0)
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        runner = doctest.DocTestRunner(optionflags=flags)
        output: list[str] = []
        runner.run(test, out=output.append)
        assert runner.failures == 0, "".join(output)
        return
    if "valkey://" in block:
        server: ServerProcess = request.getfixturevalue("valkey_server")
        block = block.replace("valkey://10.0.0.5:6379/0", f"valkey://127.0.0.1:{server.port}/0")
        block = block.replace("prefix=crawl1", f"prefix={unique_prefix()}")
    namespace: dict[str, object] = {}
    exec(compile(block, str(README), "exec"), namespace)
    for name, value in namespace.items():
        if isinstance(value, str) and value.startswith("urlsieve."):
            module, _, attribute = value.rpartition(".")
            assert hasattr(importlib.import_module(module), attribute), f"{name} = {value}"
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, str) and key.startswith("urlsieve."):
                    module, _, attribute = key.rpartition(".")
                    assert hasattr(importlib.import_module(module), attribute), key
    if "fresh" in namespace:
        assert namespace["fresh"] == ["http://example.com/a", "http://example.com/b"]
    assert os.getcwd() == str(tmp_path)
