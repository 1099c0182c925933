"""Ship replicast and what its sweep tasks import to Spark executors whose Python lacks them.

A standalone worker starts ``spark.pyspark.python`` (any Python of the driver's minor version) and
nothing else: it has Spark's own ``pyspark.zip`` on its path but not replicast, msgpack or numpy.
So the driver packs one directory — replicast (a wheel built from the checkout, or the installed
distribution's files) and the installed files of :data:`TASK_DISTRIBUTIONS` with their requirements
— into a tarball, hands it to Spark as ``spark.archives`` (Spark unpacks it in every executor's
working directory under :data:`ALIAS`) and puts that directory first on the Python workers'
``PYTHONPATH`` (``spark.executorEnv.PYTHONPATH``).  The tarball is cached by its content
(:func:`environment_key`), so the second sweep with the same code ships the same file without
packing it again.  Compiled packages (numpy, pyarrow) are the driver's builds: the workers need the
same platform and Python minor version, which PySpark checks itself ("Python in worker has
different version").
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from replicast.operators.errors import ReplicastError

#: Where the archive lands in each executor's working directory (``spark.archives``' ``#alias``).
ALIAS = "replicast_env"
#: The distributions a sweep task imports besides replicast (measured: the top-level modules in
#: ``sys.modules`` after :func:`simulator.sweep.run_task`, mapped by
#: :func:`importlib.metadata.packages_distributions`), and those PySpark's Arrow workers import for
#: the summary's ``mapInArrow``.  Their own requirements are added by :func:`closure`.
TASK_DISTRIBUTIONS = ("msgpack", "msgspec", "sortedcontainers", "simpy", "numpy", "pandas", "pyarrow", "tqdm",
                      "mypy-extensions")
#: Spark's workers bring their own PySpark (``pyspark.zip``) and Py4J.
PROVIDED_BY_SPARK = {"pyspark", "py4j"}


def executor_config(master: str, python: str | None, cache: Path | None = None) -> dict[str, str]:
    """The Spark settings that run the sweep's tasks on ``master`` with interpreter ``python``.

    A local master runs this interpreter, which has everything; any other gets the packed
    environment.  ``python`` defaults to this interpreter's path (right where the workers share
    the driver's installation; ``--spark-python`` names the workers' own otherwise)."""
    config = {"spark.pyspark.python": python or sys.executable}
    if master.startswith("local"):
        return config
    archive = pack(cache or default_cache())
    config.update({"spark.archives": f"{archive.as_uri()}#{ALIAS}",
                   # Relative: the Python worker runs in the executor's directory, where Spark unpacks
                   # the archive; PySpark appends it to its own pyspark.zip on the workers' path.
                   "spark.executorEnv.PYTHONPATH": ALIAS})
    return config


def default_cache() -> Path:
    """``$XDG_CACHE_HOME/replicast/spark`` (``~/.cache/…``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "replicast" / "spark"


def pack(cache: Path) -> Path:
    """The environment tarball for this code and these installed versions, packed once into
    ``cache``."""
    distributions = closure(TASK_DISTRIBUTIONS)
    archive = Path(cache) / f"replicast-env-{environment_key(distributions)}.tar.gz"
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="replicast-env-", dir=archive.parent) as scratch:
        site = Path(scratch) / "site"
        install_replicast(site, Path(scratch))
        for dist in distributions:
            copy_distribution(dist, site)
        partial = Path(scratch) / archive.name
        # Level 1: the archive is mostly compiled libraries, which compress little at any level.
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            for entry in sorted(site.iterdir()):
                tar.add(entry, arcname=entry.name, filter=_without_bytecode)
        os.replace(partial, archive)      # atomic: a concurrent sweep sees a whole archive or none
    return archive


def closure(names: tuple[str, ...]) -> list[metadata.Distribution]:
    """The installed distributions ``names`` and, transitively, those they require (markers
    evaluated for this interpreter, no extras), without those Spark provides."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found or name in PROVIDED_BY_SPARK:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ReplicastError(f"--spark ships {name} to the workers, but it is not installed here: "
                                 f"pip install 'replicast[sim,spark]'") from None
        found[name] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[name] for name in sorted(found)]


def environment_key(distributions: list[metadata.Distribution]) -> str:
    """A digest of what the archive holds: the interpreter's ABI and platform, each
    distribution's name and version, and replicast's source files (size and modification time), with
    setup.cfg (its version and package data)."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {platform.machine()} {sys.platform}".encode())
    for dist in distributions:
        digest.update(f"{dist.metadata['Name']}=={dist.version}\n".encode())
    checkout = source_checkout()
    if checkout is None:
        digest.update(installed_replicast().version.encode())
    else:
        for path in sorted({checkout / "setup.cfg", *_source_files(checkout)}):
            stat = path.stat()
            digest.update(f"{path.relative_to(checkout)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def source_checkout() -> Path | None:
    """The source tree replicast is imported from (``pip install -e``, or run from the checkout),
    else None: an installed distribution."""
    import replicast

    root = Path(replicast.__file__).resolve().parents[1]
    return root if (root / "setup.cfg").is_file() and (root / "simulator").is_dir() else None


def installed_replicast() -> metadata.Distribution:
    """The installed distribution that holds the ``replicast`` package imported here (not a
    ``replicast.egg-info`` of a source tree that happens to be on ``sys.path``)."""
    import replicast

    here = Path(replicast.__file__).resolve()
    for dist in metadata.distributions(name="replicast"):
        if Path(dist.locate_file("replicast/__init__.py")).resolve() == here:
            return dist
    raise ReplicastError(f"--spark cannot ship replicast: no installed distribution lists {here}")


def install_replicast(site: Path, scratch: Path) -> None:
    """Replicast into ``site``: a wheel built from its source tree (``pip wheel``, no
    dependencies), or the installed distribution's own files."""
    checkout = source_checkout()
    if checkout is None:
        copy_distribution(installed_replicast(), site)
        return
    wheels = scratch / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
               str(_build_tree(checkout, scratch))]
    # With this environment's setuptools and wheel if it has them (no download), else pip's own
    # isolated build environment (pyproject.toml's build requirements, from the package index).
    built = subprocess.run([*command, "--no-build-isolation"], capture_output=True, text=True)
    if built.returncode != 0:
        built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise ReplicastError(f"--spark: building the replicast wheel from {checkout} failed: "
                             f"{(built.stderr.strip().splitlines() or ['no output'])[-1]}")
    wheel = next(wheels.glob("replicast-*.whl"))
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                                "--target", str(site), str(wheel)], capture_output=True, text=True)
    if installed.returncode != 0:
        raise ReplicastError(f"--spark: unpacking {wheel.name} failed: "
                             f"{(installed.stderr.strip().splitlines() or ['no output'])[-1]}")


def copy_distribution(dist: metadata.Distribution, site: Path) -> None:
    """The files an installed distribution's RECORD lists under its site-packages (its modules,
    compiled libraries and metadata; not its scripts, which lie outside) into ``site``."""
    root = Path(dist.locate_file(""))
    if dist.files is None:
        raise ReplicastError(f"--spark cannot ship {dist.metadata['Name']}: its installation lists no files "
                             f"(no RECORD in {root})")
    for file in dist.files:
        if file.parts[0] == ".." or file.suffix == ".pyc":
            continue
        source = root / file
        if source.is_file():
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _package_folders(checkout: Path) -> list[str]:
    """The checkout's top-level folders that hold packages (``package_dir`` in its setup.cfg)."""
    import configparser

    config = configparser.ConfigParser()
    config.read(checkout / "setup.cfg")
    return sorted({line.split("=", 1)[1].strip().split("/")[0]
                   for line in config.get("options", "package_dir", fallback="").splitlines() if "=" in line})


def _source_files(checkout: Path):
    """The files of the checkout's package folders: what the wheel is built from, so docs or
    tests edited do not make a new archive."""
    for top in _package_folders(checkout):
        for folder, dirs, files in os.walk(checkout / top):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if not name.endswith(".pyc"):
                    yield Path(folder) / name


def _build_tree(checkout: Path, scratch: Path) -> Path:
    """A copy of what the wheel is built from — the package folders and the top-level build files
    — so the build writes nothing into the checkout and no stale ``build/`` enters the wheel."""
    tree = scratch / "source"
    # (not the checkout's own native build: the wheel's build compiles its own, with its digest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "native_manifest.json")
    for top in _package_folders(checkout):
        shutil.copytree(checkout / top, tree / top, ignore=ignore)
    for name in ("setup.cfg", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        if (checkout / name).is_file():
            shutil.copy2(checkout / name, tree / name)
    return tree


def _without_bytecode(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    return None if "__pycache__" in info.name.split("/") else info
