"""The compiled accelerator; everything else is in pyproject.toml.

``optional=True``: without a C compiler (or Python's headers) the build goes on and
urlsieve runs on its pure-Python reference code, which gives the same results, only
slower. ``urlsieve doctor`` (and ``urlsieve --version``) says which build is in use and
how to get the compiled one.

The extension needs nothing but a C compiler and Python's headers: its hash (XXH3,
``src/urlsieve/_xxh3.h``) is urlsieve's own, so every compiled path is built wherever the
extension is. It is compiled anew on every build (``build_ext --force``), so a ``build/``
directory left by an earlier build, with other flags or older sources, is never reused.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


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
            sources=["src/urlsieve/_speedups.c"],
            depends=["src/urlsieve/_xxh3.h", "src/urlsieve/_neardup.h"],
            optional=True,
        )
    ],
)
