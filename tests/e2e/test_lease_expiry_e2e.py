"""A request stuck past KAFKA_LEASE_TIMEOUT is re-queued, its record acknowledged, and its
partition goes on committing (delivery trap 2), end to end.

Two worker processes crawl an origin whose hub links to a download that hangs (the origin
holds the first fetch of ``/hang-download`` open) and to a page whose callback hangs (the
first fetch of ``/hang-callback`` answers ``HOLD`` and the callback awaits a release file),
then to ordinary leaves. With ``KAFKA_HOST_PARTITIONS=1`` every record of the crawl is in one
partition, behind the two stuck ones. Neither stuck request makes any
progress until the test releases it, so the test holds whether the lease timeout counts
from the request's start or from its last progress. While both are still stuck, the
consumer group's committed offset must have passed them and reached the partition's end,
a ``dont_filter`` copy of each must be in the log, and their pages stored by the copies.
"""

from __future__ import annotations

import select
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from helpers import wait_until
from kafka_log import Entry, acknowledged, committed, group_of, read_topic
from pymongo import MongoClient

from crawler.localstack.demo import running, wait_all, worker_logs

HERE = Path(__file__).resolve().parents[1]  # tests/
HUNG = ("/hang-download", "/hang-callback")
LEAVES = [f"/leaf/{n}" for n in range(20)]
SETTINGS = {
    # The default (600 s) suits real crawls; 10 s is far longer than any other request of
    # this small loopback site stays in flight, even on a loaded machine.
    "KAFKA_LEASE_TIMEOUT": 10,
    # The project's 30 s would end the held download (and retry it) before a loaded machine
    # is through expiry and the copy; the origin holds it only until the test has looked.
    "DOWNLOAD_TIMEOUT": 300,
    "CRAWL_IDLE_TIMEOUT": 5,  # exit 5 s after the drain instead of 30: a shorter test
    # The default spreads the host over every partition; the test needs the stuck records
    # and the leaves after them in one partition, to show its commits pass the stuck ones.
    "KAFKA_HOST_PARTITIONS": 1,
}


class _Origin(BaseHTTPRequestHandler):
    state: dict[str, Any]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.state["lock"]:
            self.state["hits"][self.path] += 1
            first = self.state["hits"][self.path] == 1
        if self.path == "/hub":
            links = "".join(f'<a href="{path}">x</a>' for path in (*HUNG, *LEAVES))
            return self._send(f"<html><body>{links}</body></html>")
        if self.path == "/hang-download" and first and not self._hold():
            return None
        if self.path == "/hang-callback" and first:
            return self._send("HOLD")
        return self._send(f"<html><title>{self.path}</title></html>")

    def _hold(self) -> bool:
        """Keep the download open until released; False if the client gave up first."""
        held: set[str] = self.state["held"]
        held.add(self.path)
        try:
            while not self.state["release"].wait(0.2):
                readable, _, _ = select.select([self.connection], [], [], 0)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return False
            return True
        finally:
            held.discard(self.path)

    def _send(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _origin() -> Iterator[tuple[str, dict[str, Any]]]:
    state = {"lock": threading.Lock(), "hits": Counter(), "held": set(),
             "release": threading.Event()}
    handler = type("Origin", (_Origin,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", state
    finally:
        state["release"].set()
        server.shutdown()
        server.server_close()


def _originals(entries: list[Entry], base: str) -> dict[str, Entry]:
    return {path: e for path in HUNG for e in entries
            if e.url == base + path and not e.dont_filter}


def _past_the_stuck(bootstrap: str, crawl_id: str, base: str) -> bool:
    """Whether the partition of the stuck records is committed to its end, past them."""
    offsets = committed(bootstrap, group_of(crawl_id))  # first: the log only grows after
    entries = read_topic(bootstrap, f"{crawl_id}.requests")
    originals = _originals(entries, base)
    if len(originals) < len(HUNG):
        return False
    tp = (originals[HUNG[0]].topic, originals[HUNG[0]].partition)
    end = max(e.offset for e in entries if (e.topic, e.partition) == tp) + 1
    return offsets.get(tp, 0) == end


def _check_while_stuck(env: dict[str, str], crawl_id: str, base: str,
                       state: dict[str, Any], log: str) -> None:
    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    offsets = committed(bootstrap, group_of(crawl_id))
    entries = read_topic(bootstrap, f"{crawl_id}.requests")
    done = set(acknowledged(entries, offsets))
    for path, original in _originals(entries, base).items():
        assert original in done, f"the stuck {path} was not acknowledged"
        behind = [e for e in done if (e.topic, e.partition) == (original.topic,
                  original.partition) and e.offset > original.offset and "/leaf/" in e.url]
        assert behind, f"no leaf behind the stuck {path} was acknowledged"
        copies = [e for e in entries if e.url == base + path and e.offset > original.offset]
        assert copies and all(e.dont_filter for e in copies), f"{path} was not re-queued"
        assert set(copies) <= done
        assert state["hits"][path] == 2, state["hits"]  # the original and one copy
    # still stuck: acknowledged while in flight, not because it ended
    assert "/hang-download" in state["held"], "the held download ended before the check"
    assert "Callback released" not in log
    with MongoClient(env["MONGO_URI"]) as client:
        stored = {d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})}
    assert {base + path for path in HUNG} <= stored, "the copies did not store the pages"


def test_a_stuck_request_is_requeued_and_its_record_acknowledged(stack, crawl_id, tmp_path):
    release = tmp_path / "release"
    env = {**stack.env(), "CRAWL_ID": crawl_id}
    with _origin() as (base, state):
        cmd = [sys.executable, "-m", "scrapy", "runspider", str(HERE / "spiders" / "hang.py"),
               "-a", f"base={base}", "-a", f"release={release}"]
        for name, value in SETTINGS.items():
            cmd += ["-s", f"{name}={value}"]
        with running(2, cmd, env, tmp_path / "logs") as workers:
            try:
                wait_until(lambda: "/hang-download" in state["held"]
                           and "Callback holds" in worker_logs(workers), 120,
                           "both requests to hang")
                wait_until(lambda: _past_the_stuck(env["KAFKA_BOOTSTRAP_SERVERS"], crawl_id,
                                                   base), 150,
                           "the partition to be committed past the stuck requests")
                _check_while_stuck(env, crawl_id, base, state, worker_logs(workers))
            finally:
                state["release"].set()
                release.touch()
            codes = wait_all(workers, timeout=180)
            logs = worker_logs(workers)
        hits = dict(state["hits"])
    assert codes == [0, 0], logs[-4000:]
    for path in HUNG:
        assert f"Lease on {base}{path} expired" in logs
        assert hits[path] == 2, hits  # the released originals ended without another fetch
    assert logs.count("Callback holds") == 1 and "Callback released" in logs
    with MongoClient(env["MONGO_URI"]) as client:
        urls = [d["url"] for d in client["crawler"][crawl_id].find({}, {"url": 1})]
    assert sorted(urls) == sorted(base + p for p in ("/hub", *HUNG, *LEAVES))
