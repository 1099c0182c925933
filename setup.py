"""setup.cfg holds the package's metadata; this file adds only the native build of the per-message
path (``replicast/native_build.py`` lists the modules and says why; docs/architecture.md).

mypyc compiles those modules when it and a C compiler are there (``pyproject.toml`` asks for mypy
in the build environment); otherwise, or with ``REPLICAST_PURE_PYTHON=1``, the package installs as
pure Python. Either way the ``.py`` files are installed and are what runs when the build is absent
or older than them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "replicast"))
import native_build  # noqa: E402  (the module list, without importing the package)


#: The commands that build extensions; metadata and sdist commands (run several times per install
#: by pip's build backend) do not need mypyc's minute of work.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop", "bdist_egg"}
ARGS = set(sys.argv[1:])
#: An editable install builds the extensions in place, beside the sources; a wheel builds them in build/lib.
IN_PLACE = bool({"editable_wheel", "develop"} & ARGS) or ("build_ext" in ARGS and bool({"--inplace", "-i"} & ARGS))
KEEP = {*native_build.NATIVE_MODULES, native_build.GROUP + "__mypyc"}


def native_extensions() -> list:
    if not BUILDS & ARGS:
        return []
    if os.environ.get(native_build.PURE_ENV):
        print(f"replicast: {native_build.PURE_ENV} is set: installing pure Python", file=sys.stderr)
        return _remove_stale(keep=set())
    if importlib.util.find_spec("simpy") is None:
        print("replicast: simpy is not installed where this builds (mypyc must see the class LinkEnvironment "
              "subclasses): installing pure Python", file=sys.stderr)
        return _remove_stale(keep=set())
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("replicast: mypyc is not installed: installing pure Python (the reference tier runs ~2x slower)",
              file=sys.stderr)
        return _remove_stale(keep=set())
    _remove_stale(keep=KEEP)
    # mypy finds modules by their dotted names: a tree named as installed (replicast/engine, …) of
    # links to the repository's folders, in the build directory.
    stage = ROOT / "build" / "native-src" / "replicast"
    stage.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.joinpath("replicast").iterdir():
        if entry.suffix == ".py":
            _link(stage / entry.name, entry)
    for package, folder in native_build.PACKAGE_DIRS.items():
        if package != "replicast":
            _link(stage / package.split(".", 1)[1], ROOT / folder)
    paths = [str(Path("build", "native-src", *module.split(".")[:-1], module.split(".")[-1] + ".py"))
             for module in native_build.NATIVE_MODULES]
    config = ROOT / "build" / "native-src" / "mypy.ini"
    # Compiled as they are typed: mypy's complaints about Optional narrowing and invariance do not
    # stop the build (the runtime checks mypyc inserts do, and the whole test suite runs native).
    config.write_text("[mypy]\nignore_missing_imports = True\nfollow_imports = silent\n"
                      "[mypy-replicast.*]\nignore_errors = True\n")
    try:
        return mypycify(["--config-file", str(config), *paths], opt_level="3", group_name=native_build.GROUP)
    except Exception as error:          # a mypyc that cannot build here: the pure package still works
        print(f"replicast: the native build failed ({error}): installing pure Python", file=sys.stderr)
        return []


def _remove_stale(keep: set[str]) -> list:
    """Extensions of modules not compiled by this build (all of them, for a pure one), left by an
    earlier build: in place for an editable install (each would shadow its ``.py``), and in
    setuptools' build/lib*, which a wheel packs whole. An in-place pure install drops the manifest too."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    places = [(ROOT / folder, package) for package, folder in native_build.PACKAGE_DIRS.items()] if IN_PLACE else []
    places += [(lib / "replicast", "replicast") for lib in ROOT.glob("build/lib*")]
    for base, package in places:
        for path in base.rglob("*.so"):
            module = ".".join([package, *path.relative_to(base).parent.parts, path.name.split(".", 1)[0]])
            if path.name.endswith(suffixes) and module not in keep:
                path.unlink(missing_ok=True)
    if IN_PLACE and not keep:
        (ROOT / "replicast" / native_build.MANIFEST).unlink(missing_ok=True)
    return []


class BuildWithManifest(build_ext):
    """``build_ext`` that writes, beside the extensions it built (in place, or in build/lib for a
    wheel), the digest of the sources they were compiled from (replicast/native_build.py)."""

    def run(self) -> None:
        super().run()
        if self.extensions:
            target = ROOT / "replicast" if self.inplace else Path(self.build_lib) / "replicast"
            target.mkdir(parents=True, exist_ok=True)
            native_build.write_manifest(ROOT, target)


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and link.resolve() == target.resolve():
            return
        link.unlink()
    link.symlink_to(target)


setup(ext_modules=native_extensions(), cmdclass={"build_ext": BuildWithManifest})
