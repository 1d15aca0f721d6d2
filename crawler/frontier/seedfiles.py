"""Seed sources for ``scrapy seed``: plain lines, JSON lines and CSV, plain or gzip, from
files or standard input; each seed checked and in normal form before it is published.

- *lines* (the default; also JSON lines): one seed a line, a URL or a JSON object
  (``{"url": ..., "priority": 3, "meta": {...}}``); blank lines and ``#`` comments are
  skipped;
- *csv*: ``url[,priority]`` rows, with an optional ``url,priority`` header.

gzip is recognised by its magic bytes, whatever the name; the format by the name
(``.csv``, ``.csv.gz``) unless given.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any, TypeVar

from crawler.frontier import codec
from crawler.frontier.seedrule import DEFAULT, SeedRule

FORMATS = ("auto", "lines", "csv")
GZIP_MAGIC = b"\x1f\x8b"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Seed:
    """A checked seed: the record value to publish and the URL it seeds."""

    value: bytes
    url: str
    host: str = field(default="", compare=False)  # the URL's, when the reader has it


@dataclass(frozen=True, slots=True)
class Bad:
    """A line that is no seed, and why."""

    where: str
    reason: str


def open_text(path: str) -> IO[str]:
    """*path* (``-``: standard input) as text, gunzipped if it is gzip."""
    raw: Any = sys.stdin.buffer if path == "-" else open(path, "rb")
    buffered: io.BufferedReader = (raw if isinstance(raw, io.BufferedReader)
                                   else io.BufferedReader(raw))
    if buffered.peek(2)[:2] == GZIP_MAGIC:
        return io.TextIOWrapper(gzip.GzipFile(fileobj=buffered), encoding="utf-8",
                                errors="replace")
    return io.TextIOWrapper(buffered, encoding="utf-8", errors="replace")


def format_of(path: str, given: str = "auto") -> str:
    if given != "auto":
        return given
    name = path.lower().removesuffix(".gz")
    return "csv" if name.endswith(".csv") else "lines"


def seed_of(text: str, rule: SeedRule = DEFAULT) -> Seed:
    """The seed of one line (a URL or a JSON object, held to *rule*: the workers take what
    ``scrapy seed`` publishes as an external seed); :class:`~crawler.frontier.codec.
    CodecError` says why it is none."""
    if not text.startswith("{"):
        url, host = codec.seed_url_and_host(text)
        return Seed(url.encode(), url, host)
    request = codec.decode_seed(text.encode(), rule=rule)  # checks every field
    data = json.loads(text)
    if data["url"] == request.url:  # in normal form already: sent as written
        return Seed(text.encode(), request.url)
    data["url"] = request.url
    return Seed(json.dumps(data, separators=(",", ":")).encode(), request.url)


def _csv_seed(row: list[str]) -> Seed:
    if not row or len(row) > 2:
        raise codec.CodecError("a CSV seed is url[,priority]")
    url, host = codec.seed_url_and_host(row[0].strip())
    if len(row) == 1 or not row[1].strip():
        return Seed(url.encode(), url, host)
    try:
        priority = int(row[1])
    except ValueError:
        raise codec.CodecError(f"priority {row[1]!r} is not an integer") from None
    return Seed(json.dumps({"url": url, "priority": priority}).encode(), url, host)


def read(handle: IO[str], source: str, fmt: str,
         rule: SeedRule = DEFAULT) -> Iterator[Seed | Bad]:
    """The seeds of *handle* (named *source* in reasons) in format *fmt*; a JSON seed that
    sets what *rule* does not allow is a :class:`Bad` line."""
    if fmt == "csv":
        for number, row in _csv_rows(handle, source):
            if isinstance(row, Bad):
                yield row
            elif number == 1 and row and row[0].strip().lower() == "url":
                continue
            elif row and "".join(row).strip():
                yield _checked(_csv_seed, row, f"{source}:{number}")
        return
    for number, line in enumerate(handle, 1):
        text = line.strip()
        if text and not text.startswith("#"):
            yield _checked(partial(seed_of, rule=rule), text, f"{source}:{number}")


def _csv_rows(handle: IO[str], source: str) -> Iterator[tuple[int, list[str] | Bad]]:
    """The rows of a CSV file, numbered; a row the csv module refuses (a NUL byte, a field
    over its size limit) is a :class:`Bad` one and the next rows are read on."""
    rows = csv.reader(handle)
    while True:
        try:
            row: list[str] | Bad = next(rows)
        except StopIteration:
            return
        except csv.Error as exc:
            row = Bad(f"{source}:{rows.line_num}", f"not CSV: {exc}")
        yield rows.line_num, row


def _checked(parse: Callable[[T], Seed], given: T, where: str) -> Seed | Bad:
    try:
        return parse(given)
    except codec.CodecError as exc:
        return Bad(where, str(exc))
