"""The compiled accelerator; everything else is in pyproject.toml.

``optional=True``: without a C compiler (or Python's headers) the build goes on and
urlsieve runs on its pure-Python reference code, which gives the same results, only
slower. ``urlsieve doctor`` (and ``urlsieve --version``) says which build is in use and
how to get the compiled one.

The extension needs nothing but a C compiler and Python's headers: its hash (XXH3,
``src/urlsieve/_xxh3.h``) is urlsieve's own, so every compiled path is built wherever the
extension is. It is compiled anew on every build (``build_ext --force``), so a ``build/``
directory left by an earlier build, with other flags or older sources, is never reused.

Its C units are listed once, in ``SPEEDUPS_SOURCES`` (``tests/url/test_speedups.py`` reads
this list to build them itself); ``src/urlsieve/_speedups.c`` has their table of contents.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The C units of urlsieve._speedups (the table of contents is at the top of the first).
SPEEDUPS_SOURCES = [
    "src/urlsieve/_speedups.c",
    "src/urlsieve/_sp_scan.c",
    "src/urlsieve/_sp_rewrite.c",
    "src/urlsieve/_sp_hash.c",
    "src/urlsieve/_sp_stores.c",
    "src/urlsieve/_sp_lookup.c",
    "src/urlsieve/_sp_verdicts.c",
    "src/urlsieve/_sp_compile.c",
    "src/urlsieve/_sp_squid.c",
    "src/urlsieve/_sp_neardup.c",
]
#: The headers they include (a change rebuilds; MANIFEST.in ships them in the sdist).
SPEEDUPS_HEADERS = ["src/urlsieve/_speedups.h", "src/urlsieve/_xxh3.h", "src/urlsieve/_neardup.h"]


class FreshBuildExt(build_ext):
    """``build_ext`` that never takes an extension left in ``build/`` for an up-to-date one."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.force = True

    def finalize_options(self) -> None:
        super().finalize_options()
        self.force = True


setup(
    cmdclass={"build_ext": FreshBuildExt},
    ext_modules=[
        Extension(
            "urlsieve._speedups",
            sources=SPEEDUPS_SOURCES,
            depends=SPEEDUPS_HEADERS,
            optional=True,
        )
    ],
)
