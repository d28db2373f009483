"""The compiled accelerator; everything else is in pyproject.toml.

``optional=True``: without a C compiler (or Python's headers) the build goes
on and urlsieve runs on its pure-Python reference code, which gives the same
results, only slower (``urlsieve.url.parse.ACCELERATED`` tells which is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "urlsieve._speedups",
            sources=["src/urlsieve/_speedups.c"],
            optional=True,
        )
    ]
)
