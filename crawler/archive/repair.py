"""Close the ``.open`` WARC files of dead writers, cut back to their last complete record.

A worker killed with ``kill -9`` leaves its ``.open`` file behind, its last gzip member
possibly cut. At start-up a worker repairs every ``.open`` file of ``WARC_DIR`` whose writer
ran on this host and is dead (its PID is gone, or is this process's own PID with another
tag: a container restarted), and that no process holds locked: it keeps the complete gzip
members whose records warcio reads with their digests intact, cuts the rest, and renames
the file to its closed name (a file with no complete record is removed). Blocking I/O: run
it in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from warcio.archiveiterator import ArchiveIterator

from crawler.archive.warcfile import EXTENSION, OPEN_SUFFIX, WriterId, sync_directory

logger = logging.getLogger(__name__)
CHUNK = 1 << 20  # bytes read at once
OUT = 1 << 20  # bytes decompressed at once (a member's output is dropped as it comes)


@dataclass(frozen=True, slots=True)
class Repaired:
    path: Path  # the closed file (or the removed .open one)
    cut: int  # bytes cut off the end
    records: int  # complete records kept
    removed: bool = False  # no complete record: the file is gone


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def writer_dead(writer: WriterId, me: WriterId,
                alive: Callable[[int], bool] = pid_alive) -> bool:
    """Whether *writer* (of a file's name) is a dead process of this host."""
    if writer.host != me.host:
        return False  # another host's: its own workers repair it
    if writer.pid == me.pid:
        return writer.tag != me.tag
    return not alive(writer.pid)


def prepare_directory(directory: Path, me: WriterId) -> list[Repaired]:
    """Create *directory* if need be, then :func:`repair_dead_writers` in it."""
    directory.mkdir(parents=True, exist_ok=True)
    return repair_dead_writers(directory, me)


def repair_dead_writers(directory: Path, me: WriterId) -> list[Repaired]:
    """Repair the ``.open`` files of *directory* whose writer is dead (see the module)."""
    repaired = []
    for path in sorted(directory.glob(f"*{EXTENSION}{OPEN_SUFFIX}")):
        writer = WriterId.of_file(path.name)
        if writer is not None and writer_dead(writer, me):
            done = repair_file(path)
            if done is not None:
                repaired.append(done)
    return repaired


def repair_file(path: Path) -> Repaired | None:
    """Cut *path* to its complete records and close it; None if a process holds it locked
    or it is gone (another worker repaired it first)."""
    try:
        fh = open(path, "r+b")  # closed by the with below
    except FileNotFoundError:
        return None
    with fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # its writer lives, or another worker repairs it now
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fh.fileno()).st_ino:
                return _repair_locked(path, fh)
    return None


def _repair_locked(path: Path, fh: BinaryIO) -> Repaired:
    size = os.fstat(fh.fileno()).st_size
    end, records = complete_prefix(fh)
    if end < size:
        fh.truncate(end)
        os.fsync(fh.fileno())
    if records == 0:
        path.unlink()
        sync_directory(path.parent)
        return Repaired(path, size, 0, removed=True)
    closed = path.with_name(path.name.removesuffix(OPEN_SUFFIX))
    os.rename(path, closed)
    sync_directory(path.parent)
    return Repaired(closed, size - end, records)


def complete_prefix(fh: BinaryIO) -> tuple[int, int]:
    """``(end, n)``: the first *n* records of *fh* are complete and valid and end at *end*."""
    ends = member_ends(fh)
    fh.seek(0)
    valid = valid_records(_Bounded(fh, ends[-1] if ends else 0))
    return (ends[valid - 1] if valid else 0), valid


def verify_file(path: Path) -> tuple[int, list[str]]:
    """``(records, problems)`` of a closed file: every gzip member complete, one record in
    each, every digest right. (``warcio check`` passes a file whose last record is cut: it
    says "digest present but not checked" and exits 0.)"""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        ends = member_ends(fh)
        fh.seek(0)
        valid = valid_records(_Bounded(fh, ends[-1] if ends else 0))
    end, problems = (ends[-1] if ends else 0), []
    if end != size:
        problems.append(f"bytes {end}-{size} are no complete gzip member")
    if valid != len(ends):
        problems.append(f"record {valid + 1} of {len(ends)} is unreadable or its digest wrong")
    return valid, problems


def member_ends(fh: BinaryIO) -> list[int]:
    """The offsets where each complete gzip member of *fh* ends, up to the first that is
    cut or corrupt."""
    ends: list[int] = []
    offset, data = 0, b""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    while True:
        if not data:
            data = fh.read(CHUNK)
            if not data:
                return ends
        try:
            inflater.decompress(data, OUT)
        except zlib.error:
            return ends
        rest = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
        offset += len(data) - len(rest)
        data = rest
        if inflater.eof:
            ends.append(offset)
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)


def valid_records(stream: BinaryIO | _Bounded) -> int:
    """How many records, from the first, warcio reads whole with their digests intact."""
    valid = 0
    try:
        for record in ArchiveIterator(stream, check_digests=True):
            content = record.content_stream()
            while content.read(CHUNK):
                pass
            if record.digest_checker.passed is False:
                break
            valid += 1
    except Exception as exc:  # whatever warcio or zlib makes of a broken record
        logger.debug("WARC record %d unreadable: %s", valid, exc)
    return valid


class _Bounded:
    """The first *limit* bytes of a file, as warcio reads it (``read``, ``tell``)."""

    def __init__(self, fh: BinaryIO, limit: int) -> None:
        self.fh, self.left = fh, limit

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        data = self.fh.read(size)
        self.left -= len(data)
        return data

    def tell(self) -> int:
        return self.fh.tell()
