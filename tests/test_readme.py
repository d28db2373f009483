"""The Python examples of the README and of docs/ run as written (they once failed when pasted).

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

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", page.read_text("utf-8"), re.M | re.S)


BLOCKS = [(page, block) for page in PAGES for block in _blocks(page)]


def _ids() -> list[str]:
    return [f"{page.stem}-{block.splitlines()[0][:30]}" for page, block in BLOCKS]


def test_the_readme_and_the_guide_have_python_examples() -> None:
    assert len(_blocks(README)) >= 2
    assert len(BLOCKS) >= 8


def test_the_readme_is_a_front_page() -> None:
    """The README stays short (issue 32): the guide lives in docs/, and every page it links
    to is there."""
    text = README.read_text("utf-8")
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links
    for link in links:
        assert (ROOT / link).is_file(), link


@pytest.mark.parametrize(("page", "block"), BLOCKS, ids=_ids())
def test_readme_example_runs(
    page: Path,
    block: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.chdir(tmp_path)
    if block.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block, {}, page.name, str(page), 0)
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
    exec(compile(block, str(page), "exec"), namespace)
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


def test_the_configuration_reference_names_every_variable() -> None:
    """Every ``URLSIEVE_*`` variable the gateway reads is in docs/configuration.md."""
    from urlsieve.config import OPTIONS

    text = (ROOT / "docs" / "configuration.md").read_text("utf-8")
    documented = set(re.findall(r"URLSIEVE_[A-Z_]+", text))
    read = {variable for _section, _key, variable, _kind in OPTIONS.values()}
    assert read - documented == set()
