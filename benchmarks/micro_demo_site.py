"""Demo site microbenchmark: requests a second the demo site's server
(:func:`crawler.localstack.demo_site.serve`) answers to a few clients on kept-alive connections.

Each client thread opens one HTTP/1.1 connection and sends its requests one after the other
on it; the server counts the connections it accepted, so a run whose connections were not
reused is reported as such rather than measured.
"""

from __future__ import annotations

import http.client
import socket
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.micro_result import QUICK, Measurement, Sizes, at_least, median_of
from crawler.localstack.demo_site import DemoServer, generate, page_path, serve

DEMO_SITE = "Demo site keep-alive throughput"
PAGES = 200
CLIENTS = 4


def count_connections(server: DemoServer) -> list[object]:
    """Wrap the server's accept so that every connection it takes is listed."""
    accepted: list[object] = []
    accept = server.get_request

    def counting() -> tuple[socket.socket, object]:
        conn, address = accept()
        accepted.append(address)
        return conn, address

    server.get_request = counting  # type: ignore[method-assign]
    return accepted


def _client(host: str, port: int, requests: int, errors: list[str]) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        for i in range(requests):
            conn.request("GET", "/" + page_path(i % PAGES))
            response = conn.getresponse()
            response.read()
            if response.status != 200 or response.will_close:
                errors.append(f"status {response.status}, will_close {response.will_close}")
                return
    except OSError as exc:
        errors.append(repr(exc))
    finally:
        conn.close()


def one_run(directory: Path, per_client: int) -> float:
    """Requests a second of one run; raises if a request failed or a connection was not reused."""
    server = serve(directory)
    accepted = count_connections(server)
    host, port = str(server.server_address[0]), int(server.server_address[1])
    errors: list[str] = []
    threads = [threading.Thread(target=_client, args=(host, port, per_client, errors))
               for _ in range(CLIENTS)]
    started = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        server.close()
    if errors or len(accepted) != CLIENTS:
        raise RuntimeError(f"keep-alive run failed: {errors[:3]}, {len(accepted)} connections")
    return CLIENTS * per_client / elapsed


def run(sizes: Sizes) -> list[Measurement]:
    per_client = 150 if sizes is QUICK else 2_000
    with tempfile.TemporaryDirectory(prefix="micro-site-") as directory:
        generate(Path(directory), PAGES)
        one_run(Path(directory), 20)  # warm up
        values = [one_run(Path(directory), per_client) for _ in range(max(sizes.repeats, 3))]
    note = (f"{CLIENTS} clients, one kept-alive connection each, {per_client:,} requests a "
            f"client, pages of 5-8 KiB")
    return [median_of(DEMO_SITE, "requests per second", values, "requests/s", at_least(200),
                      note)]
