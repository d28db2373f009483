"""Sphinx configuration of urlsieve's documentation (built by .ci/run with warnings as errors).

Build: ``pip install -e '.[docs]' && sphinx-build -W --keep-going -b html docs docs/_build``.
"""

project = "urlsieve"
author = "the urlsieve authors"
copyright = "2026, the urlsieve authors"  # noqa: A001 (Sphinx's own name)

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "screenshots/*.md"]

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

html_theme = "furo"
html_title = "urlsieve"
