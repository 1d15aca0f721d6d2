"""One worker's WARC files: named, written a gzip member per record, rotated by size.

A file is written as ``<name>.warc.gz.open`` and renamed to ``<name>.warc.gz`` once it is
complete and on disk (rotation, close), as Heritrix does: a shipper takes closed files
only. The name says who wrote it::

    <prefix>-<17-digit UTC time>-<serial>-<host>~<pid>~<tag>.warc.gz

The writer holds an exclusive ``flock`` on its open file for its whole life, so that a
repair (:mod:`crawler.archive.repair`) never touches a file a live process writes.

:class:`WarcFile` does blocking I/O: one thread calls it (:class:`crawler.archive.writer.
DurableWriter` runs it in a single-thread executor).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from warcio.recordloader import ArcWarcRecord
from warcio.warcwriter import WARCWriter

from crawler.archive.records import WARC_VERSION, warcinfo_record

logger = logging.getLogger(__name__)
EXTENSION = ".warc.gz"
OPEN_SUFFIX = ".open"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
NAME_RE = re.compile(r"^(?P<prefix>[A-Za-z0-9._-]+)-(?P<stamp>\d{17})-(?P<serial>\d{5,})-"
                     r"(?P<host>[A-Za-z0-9._-]+)~(?P<pid>\d+)~(?P<tag>[A-Za-z0-9._-]+)"
                     r"\.warc\.gz(?P<open>\.open)?$")


def safe(text: str) -> str:
    """*text* usable in a file name: every character but ``[A-Za-z0-9._-]`` made ``_``."""
    return _UNSAFE.sub("_", text) or "_"


@dataclass(frozen=True, slots=True)
class WriterId:
    """The process that writes a file: its host, PID and random tag (of its worker id)."""

    host: str  # file-name safe
    pid: int
    tag: str

    @classmethod
    def of_worker(cls, worker: str) -> WriterId:
        """Of a worker id, ``host:pid:tag`` (:func:`crawler.config.keys.worker_id`)."""
        host, pid, tag = worker.rsplit(":", 2)
        return cls(safe(host), int(pid), safe(tag))

    @classmethod
    def of_file(cls, name: str) -> WriterId | None:
        """Of a WARC file name; None for a name this module did not make."""
        match = NAME_RE.match(name)
        if match is None:
            return None
        return cls(match["host"], int(match["pid"]), match["tag"])

    @property
    def label(self) -> str:
        return f"{self.host}~{self.pid}~{self.tag}"


def file_name(prefix: str, moment: datetime, serial: int, writer: WriterId) -> str:
    """The closed name of a file opened at *moment* (UTC)."""
    stamp = moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"
    return f"{prefix}-{stamp}-{serial:05d}-{writer.label}{EXTENSION}"


def encode(records: Sequence[ArcWarcRecord]) -> bytes:
    """*records* as WARC/1.1, one gzip member each (warcio computes the digests)."""
    buffer = io.BytesIO()
    writer = WARCWriter(buffer, gzip=True, warc_version=WARC_VERSION)
    for record in records:
        writer.write_record(record)
    return buffer.getvalue()


def sync_directory(directory: Path) -> None:
    """fsync *directory*: a file created, renamed or removed in it stays so after a crash."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class Written:
    size: int  # bytes added to the files (a new file's warcinfo record included)
    files: int  # files opened for it (0 or 1)


class WarcFile:
    """The WARC files of one writer: the open one and the serial of the next."""

    def __init__(self, directory: Path, prefix: str, writer: WriterId, *, max_size: int,
                 info: Mapping[str, str]) -> None:
        self.directory, self.prefix, self.writer = directory, prefix, writer
        self.max_size, self.info = max_size, dict(info)
        self.serial = 0
        self.path: Path | None = None  # the open file's path (``.open``)
        self._fd: int | None = None
        self._size = 0
        self._lost: OSError | None = None  # a rotated file's failed fsync, not yet told

    def write(self, records: Sequence[ArcWarcRecord]) -> Written:
        """Append *records* (after a rotation if the open file is full). On an error the
        file is cut back to where it was and the error raised: nothing half-written stays."""
        opened = 0
        if self._fd is not None and self._size >= self.max_size:
            self._finish()
        if self._fd is None:
            before = self._open()
            opened = 1
        else:
            before = self._size
        self._append(encode(records))
        return Written(self._size - before, opened)

    def sync(self) -> None:
        """fsync what was written since the last call. If that fails the open file is closed
        as it is (records after its last good fsync may be lost in a crash: the callers
        write them again) and the error raised; so is a failed fsync of a file rotated
        since the last call."""
        lost, self._lost = self._lost, None
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError:
                self._abandon()
                raise
        if lost is not None:
            raise lost

    def close(self) -> None:
        """fsync, close and rename the open file, if any."""
        if self._fd is not None:
            self._finish()
        lost, self._lost = self._lost, None
        if lost is not None:
            raise lost

    def _open(self) -> int:
        """A new ``.open`` file, locked, with its warcinfo record; its size before it (0)."""
        closed = file_name(self.prefix, datetime.now(UTC), self.serial, self.writer)
        self.serial += 1
        path = self.directory / (closed + OPEN_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._fd, self.path, self._size = fd, path, 0
        try:
            sync_directory(self.directory)
            self._append(encode([warcinfo_record(closed, self.info)]))
        except OSError:
            self._fd = self.path = None
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        logger.info("WARC file %s opened", path)
        return 0

    def _append(self, data: bytes) -> None:
        assert self._fd is not None
        start, view = self._size, memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            raise
        self._size = start + len(data)

    def _finish(self) -> None:
        assert self._fd is not None
        try:
            os.fsync(self._fd)
        except OSError as exc:  # told by the next sync(): its records are written again
            self._lost = exc
        self._abandon()

    def _abandon(self) -> None:
        """Close the open file and give it its closed name."""
        fd, path = self._fd, self.path
        self._fd = self.path = None
        assert fd is not None and path is not None
        with contextlib.suppress(OSError):
            os.close(fd)
        closed = path.with_name(path.name.removesuffix(OPEN_SUFFIX))
        os.rename(path, closed)
        sync_directory(self.directory)
        logger.info("WARC file %s closed (%d bytes)", closed, self._size)
