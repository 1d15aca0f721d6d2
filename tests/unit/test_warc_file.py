"""WARC files (crawler.archive): records warcio reads back with their digests, files rotated
by size and closed by a rename, fsyncs grouped and awaited, a failed write cut back and
tried again, and the torn ``.open`` file of a dead writer repaired (and only such a file)."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.checker import Checker

from crawler.archive import (
    Capture,
    DurableWriter,
    Seen,
    WarcFile,
    WriterId,
    capture_records,
    payload_digest,
    prepare_directory,
    repair_file,
    verify_file,
    warc_date,
)
from crawler.archive import warcfile as warcfile_module
from crawler.archive.repair import writer_dead
from crawler.archive.warcfile import NAME_RE, OPEN_SUFFIX

ME = WriterId.of_worker("host-a.example:4242:abc123")


def capture(n: int, body: bytes | None = None) -> Capture:
    url = f"http://site.example/p/{n}"
    return Capture(url=url, request_url=url, request_line=f"GET /p/{n} HTTP/1.1",
                   request_headers=[("Host", "site.example"), ("Accept", "*/*")],
                   request_body=b"", status_line="HTTP/1.1 200 OK",
                   headers=[("Content-Type", "text/html"), ("Set-Cookie", "a=1\nb=2")],
                   body=body if body is not None else os.urandom(700) + b"%d" % n,
                   ip="192.0.2.7")


def records_of(n: int, previous: Seen | None = None, body: bytes | None = None) -> list[Any]:
    c = capture(n, body)
    return capture_records(c, digest=payload_digest(c.body), date=warc_date(),
                           previous=previous)


def warcio_check(path: Path) -> int:
    """``warcio check PATH``'s exit value."""
    return int(Checker(SimpleNamespace(inputs=[str(path)], verbose=False)).process_all())


def read(path: Path) -> list[Any]:
    with open(path, "rb") as fh:
        out = []
        for record in ArchiveIterator(fh):
            http = record.http_headers
            out.append((record.rec_type, dict(record.rec_headers.headers),
                        http.headers if http else None, record.content_stream().read()))
        return out


def assert_valid(path: Path) -> int:
    """Every file passes ``warcio check`` and is whole (every gzip member complete, every
    digest right); its record count."""
    records, problems = verify_file(path)
    assert not problems, (path.name, problems)
    assert warcio_check(path) == 0, path.name
    return records


def closed_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.warc.gz"))


def test_records_of_a_capture_read_back_with_their_digests(tmp_path: Path) -> None:
    file = WarcFile(tmp_path, "crawl", ME, max_size=10**9, info={"software": "t"})
    file.write(records_of(1))
    assert file.path is not None and file.path.name.endswith(OPEN_SUFFIX)
    file.close()
    [path] = closed_files(tmp_path)
    assert assert_valid(path) == 3
    (info, _, _, fields), (kind, response, http, body), (req, request, sent, _) = read(path)
    assert (info, kind, req) == ("warcinfo", "response", "request")
    assert b"software: t" in fields and response["WARC-IP-Address"] == "192.0.2.7"
    assert request["WARC-Concurrent-To"] == response["WARC-Record-ID"]
    assert response["WARC-Payload-Digest"] == payload_digest(body)
    assert ("Set-Cookie", "a=1") in http and ("Set-Cookie", "b=2") in http  # one a line
    assert sent[0] == ("Host", "site.example") and response["WARC-Date"].endswith("Z")
    assert NAME_RE.match(path.name) and WriterId.of_file(path.name) == ME


def test_an_identical_payload_gives_a_revisit_record(tmp_path: Path) -> None:
    body = b"<html>same</html>"
    first = records_of(1, body=body)
    date = first[0].rec_headers.get_header("WARC-Date")
    again = records_of(1, previous=Seen(payload_digest(body), date), body=body)
    changed = records_of(1, previous=Seen(payload_digest(b"old"), date), body=body)
    file = WarcFile(tmp_path, "crawl", ME, max_size=10**9, info={})
    for records in (first, again, changed):
        file.write(records)
    file.close()
    [path] = closed_files(tmp_path)
    assert_valid(path)
    kinds = [(kind, headers) for kind, headers, _, _ in read(path)]
    assert [k for k, _ in kinds] == ["warcinfo", "response", "request", "revisit", "request",
                                     "response", "request"]
    revisit = kinds[3][1]
    assert revisit["WARC-Profile"].endswith("/warc/1.1/revisit/identical-payload-digest")
    assert revisit["WARC-Refers-To-Date"] == date
    assert revisit["WARC-Refers-To-Target-URI"] == "http://site.example/p/1"
    assert revisit["WARC-Payload-Digest"] == payload_digest(body)
    assert Seen.decode(Seen("sha1:X", date).encode().encode()) == Seen("sha1:X", date)


def test_files_rotate_by_size_and_each_opens_with_warcinfo(tmp_path: Path) -> None:
    file = WarcFile(tmp_path, "crawl", ME, max_size=3000, info={"software": "t"})
    written = [file.write(records_of(n)) for n in range(7)]
    assert list(tmp_path.glob(f"*{OPEN_SUFFIX}")) == [file.path]  # only the current one
    file.close()
    files = closed_files(tmp_path)
    assert len(files) == sum(w.files for w in written) > 2
    assert sum(w.size for w in written) == sum(p.stat().st_size for p in files)
    assert [NAME_RE.match(p.name)["serial"] for p in files] == [  # type: ignore[index]
        f"{n:05d}" for n in range(len(files))]
    assert sum(assert_valid(p) for p in files) == len(files) + 14
    assert all(read(p)[0][0] == "warcinfo" for p in files)
    assert not list(tmp_path.glob(f"*{OPEN_SUFFIX}"))


def test_a_failed_write_is_cut_back_and_tried_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk in the middle of a record: nothing half-written stays, the record waits
    and is written whole once the disk has room again."""
    file = WarcFile(tmp_path, "crawl", ME, max_size=10**9, info={})
    file.write(records_of(0))
    real_write, calls = os.write, []

    def full_once(fd: int, data: Any) -> int:
        calls.append(os.fstat(fd).st_size)  # the file's size as each attempt begins
        if len(calls) == 1:
            real_write(fd, bytes(data[:100]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(warcfile_module.os, "write", full_once)
    writer = DurableWriter(file, interval=0.0)

    async def scenario() -> None:
        await writer.write_until_durable(records_of(1))  # tried again 1 s later
        await writer.close()

    asyncio.run(scenario())
    [path] = closed_files(tmp_path)
    assert assert_valid(path) == 5 and len(calls) == 2
    assert calls[1] == calls[0]  # the 100 bytes written before the error were cut off


class Recording(WarcFile):
    """A WarcFile that notes the order of writes and fsyncs."""

    events: list[str]

    def write(self, records: Any) -> Any:
        self.events.append("write")
        return super().write(records)

    def sync(self) -> None:
        self.events.append("sync-start")
        super().sync()
        self.events.append("sync-end")


def test_fsyncs_are_grouped_and_awaited(tmp_path: Path) -> None:
    """Many pages at once share an fsync, and none is handed back before an fsync that
    began after its records were written has ended."""
    file = Recording(tmp_path, "crawl", ME, max_size=10**9, info={})
    file.events = []
    writer = DurableWriter(file, interval=0.05)

    async def one(n: int) -> None:
        await writer.write(records_of(n))
        file.events.append(f"done-{n}")

    async def scenario() -> None:
        await asyncio.gather(*(one(n) for n in range(60)))
        await writer.close()

    asyncio.run(scenario())
    events = file.events
    for n in range(60):
        done = events.index(f"done-{n}")
        write = [i for i, e in enumerate(events[:done]) if e == "write"][n]
        assert "sync-end" in events[events.index("sync-start", write):done], n
    assert writer.synced == 120 and writer.fsyncs <= 4  # 60 pages, 2 records each
    assert_valid(closed_files(tmp_path)[0])


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def torn_open_file(directory: Path, writer: WriterId, records: int, torn: int) -> Path:
    """An ``.open`` file of *writer* with *records* pairs and *torn* bytes of one more."""
    file = WarcFile(directory, "crawl", writer, max_size=10**9, info={})
    for n in range(records):
        file.write(records_of(n))
    assert file.path is not None
    path = file.path
    os.close(file._fd)  # type: ignore[arg-type]  # the writer dies: its lock goes too
    with open(path, "ab") as fh:
        fh.write(warcfile_module.encode(records_of(99))[:torn])
    return path


def test_a_dead_writers_torn_file_is_cut_to_its_last_record_and_closed(tmp_path: Path) -> None:
    dead = WriterId(ME.host, dead_pid(), "old000")
    path = torn_open_file(tmp_path, dead, records=3, torn=500)
    before = path.stat().st_size
    assert verify_file(path)[1]  # torn: the check finds it
    [done] = prepare_directory(tmp_path, ME)
    assert done.cut == 500 and done.records == 7 and not done.removed
    assert done.path.stat().st_size == before - 500 and not path.exists()
    assert assert_valid(done.path) == 7 and closed_files(tmp_path) == [done.path]


def test_a_file_of_a_dead_writer_with_no_complete_record_is_removed(tmp_path: Path) -> None:
    dead = WriterId(ME.host, dead_pid(), "old000")
    path = torn_open_file(tmp_path, dead, records=1, torn=0)
    with open(path, "r+b") as fh:
        fh.truncate(40)  # within the warcinfo record
    [done] = prepare_directory(tmp_path, ME)
    assert done.removed and not list(tmp_path.iterdir())


def test_only_dead_writers_of_this_host_are_repaired(tmp_path: Path) -> None:
    assert writer_dead(WriterId(ME.host, dead_pid(), "x"), ME)
    assert not writer_dead(WriterId(ME.host, os.getppid(), "x"), ME)  # alive
    assert not writer_dead(WriterId("host-b", dead_pid(), "x"), ME)  # another host's
    assert writer_dead(WriterId(ME.host, ME.pid, "before"), ME)  # this PID, restarted
    assert not writer_dead(ME, ME)  # this very writer
    live = WarcFile(tmp_path, "crawl", WriterId(ME.host, ME.pid, "before"), max_size=10**9,
                    info={})
    live.write(records_of(1))  # holds its lock, though its name says "dead"
    assert live.path is not None
    with open(live.path, "ab") as fh:
        fh.write(b"\x1f\x8b partial")
    size = live.path.stat().st_size
    assert prepare_directory(tmp_path, ME) == [] and repair_file(live.path) is None
    assert live.path.stat().st_size == size  # untouched
    live.close()
