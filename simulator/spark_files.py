"""Where a Spark sweep's tasks read their trace and write their dataset: pyarrow's filesystems.

Executors on other machines see neither the driver's working directory nor, unless it is shared,
its disks.  So a sweep names its trace and its output by URL — ``file:///shared/…`` (a mount every
worker has at the same place) or an object store (``s3://bucket/…``, ``gs://…``, ``hdfs://…``,
whatever :func:`pyarrow.fs.FileSystem.from_uri` opens) — and a plain path means the same as its
``file://`` URL.  A task copies the trace directory into a per-machine cache once
(:func:`local_trace`), simulates into a scratch directory and uploads its partition of the dataset
(:meth:`Location.upload`); the driver's summary reads the dataset through Spark
(:meth:`Location.for_spark`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from replicast.operators.errors import ReplicastError

#: Hadoop's S3 connector is ``s3a``; pyarrow says ``s3``.
SPARK_SCHEMES = {"s3": "s3a"}


def is_url(text: str | os.PathLike) -> bool:
    """Whether ``text`` names a filesystem by scheme (``file://…``, ``s3://…``)."""
    return "://" in str(text)


@dataclass(frozen=True)
class Location:
    """A directory on a pyarrow filesystem, by URI (picklable: tasks reopen the filesystem)."""

    uri: str

    @classmethod
    def of(cls, text: str | os.PathLike) -> "Location":
        """A URL as it is; a path as its absolute ``file://`` URL."""
        return cls(str(text).rstrip("/") if is_url(text) else Path(text).resolve().as_uri())

    def open(self) -> tuple[Any, str]:
        """The filesystem and the path on it, or a one-line error naming the URL."""
        from pyarrow import fs

        try:
            return fs.FileSystem.from_uri(self.uri)
        except (OSError, ValueError) as error:
            raise ReplicastError(f"cannot open {self.uri}: {error}") from None

    @property
    def local_path(self) -> Path | None:
        """The path on this machine's disk for a ``file://`` location, else None (without opening
        the filesystem: an object store's would ask the network)."""
        from urllib.parse import unquote, urlparse

        parts = urlparse(self.uri)
        return Path(unquote(parts.path)) if parts.scheme == "file" else None

    def child(self, *parts: str) -> "Location":
        return Location("/".join([self.uri, *parts]))

    def make(self) -> None:
        filesystem, path = self.open()
        filesystem.create_dir(path, recursive=True)

    def remove(self) -> None:
        """Delete this directory and everything under it, if it is there."""
        from pyarrow import fs

        filesystem, path = self.open()
        if filesystem.get_file_info(path).type != fs.FileType.NotFound:
            filesystem.delete_dir(path)

    def upload(self, local: Path, *parts: str) -> None:
        """Copy the local file or directory ``local`` to ``parts`` under this location."""
        from pyarrow import fs

        filesystem, path = self.open()
        target = "/".join([path, *parts])
        filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
        fs.copy_files(str(local), target, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem)

    def for_spark(self) -> str:
        """The URI Spark's Hadoop filesystems read (``s3a://`` for ``s3://``)."""
        scheme, rest = self.uri.split("://", 1)
        return f"{SPARK_SCHEMES.get(scheme, scheme)}://{rest}"


def local_trace(scenario: Any, cache: Path | None = None) -> Any:
    """``scenario`` with a trace URL replaced by a copy of that directory on this machine's disk
    (made once per machine and URL); any other trace as it is."""
    if not is_url(scenario.trace):
        return scenario
    location = Location.of(scenario.trace)
    here = location.local_path
    if here is not None:
        return replace(scenario, trace=str(here))
    from pyarrow import fs

    cache = cache or Path(tempfile.gettempdir()) / "replicast-traces"
    target = cache / hashlib.sha256(location.uri.encode()).hexdigest()[:16]
    if not target.is_dir():
        filesystem, path = location.open()
        if filesystem.get_file_info(path).type != fs.FileType.Directory:
            raise ReplicastError(f"trace {location.uri} is not a directory")
        cache.mkdir(parents=True, exist_ok=True)
        # Copied aside and renamed: tasks on one machine that copy at once each see a whole trace.
        scratch = Path(tempfile.mkdtemp(prefix=f"{target.name}-", dir=cache))
        fs.copy_files(path, str(scratch), source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem())
        try:
            os.rename(scratch, target)
        except OSError:                  # another task renamed its copy first
            shutil.rmtree(scratch, ignore_errors=True)
    return replace(scenario, trace=str(target))
