"""WARC/1.1 archive of the pages a worker fetches (``WARC_ENABLED``, ``docs/warc.md``).

- ``config.py``: the ``WARC_*`` settings, read once (:class:`WarcConfig`);
- ``records.py``: the records of one capture, built with warcio (:class:`Capture`,
  :func:`capture_records`, :func:`payload_digest`);
- ``warcfile.py``: one worker's files, named, rotated by size, closed by a rename
  (:class:`WarcFile`, :class:`WriterId`);
- ``writer.py``: writes in a thread of their own, fsyncs grouped, retried until durable
  (:class:`DurableWriter`);
- ``repair.py``: the ``.open`` files of dead writers cut to their last complete record and
  closed (:func:`prepare_directory`, :func:`repair_file`), a closed file checked whole
  (:func:`verify_file`);
- ``digests.py``: each URL's last payload digest, shared in Redis, for revisit records
  (:class:`DigestBook`, :class:`RedisDigests`, :class:`MemoryDigests`).

The Scrapy side is :class:`crawler.middlewares.warc.WarcMiddleware`.
"""

from crawler.archive.config import WarcConfig, check_directory
from crawler.archive.digests import DigestBook, DigestStore, MemoryDigests, RedisDigests
from crawler.archive.records import Capture, Seen, capture_records, payload_digest, warc_date
from crawler.archive.repair import Repaired, prepare_directory, repair_file, verify_file
from crawler.archive.warcfile import WarcFile, WriterId
from crawler.archive.writer import DurableWriter

__all__ = ["Capture", "DigestBook", "DigestStore", "DurableWriter", "MemoryDigests",
           "RedisDigests", "Repaired", "Seen", "WarcConfig", "WarcFile", "WriterId",
           "capture_records", "check_directory", "payload_digest", "prepare_directory",
           "repair_file", "verify_file", "warc_date"]
