"""The demo site served slowly, logging the start and the end of every request, so a test can
tell how many requests were in flight to the host at once (:meth:`CountingServer.peak`).

The start is taken when the request line has been read, the end just before the response
goes out: a client cannot have seen the answer before the end, so the server never counts
more requests at once than the clients had in flight.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from crawler.localstack import demo_site

ROBOTS = "/robots.txt"


class _SlowHandler(demo_site._Handler):
    def do_GET(self) -> None:
        server: CountingServer = self.server  # type: ignore[assignment]
        start = server.begin()
        time.sleep(server.latency)
        server.end(start, self.path)
        super().do_GET()


class CountingServer(demo_site.DemoServer):
    latency = 0.0

    def __init__(self, *args: Any, latency: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.latency = latency
        self.intervals: list[tuple[float, float, str]] = []
        self._lock = threading.Lock()
        self._now = 0
        self.live_peak = 0

    def begin(self) -> float:
        with self._lock:
            self._now += 1
            self.live_peak = max(self.live_peak, self._now)
        return time.monotonic()

    def end(self, start: float, path: str) -> None:
        with self._lock:
            self._now -= 1
            self.intervals.append((start, time.monotonic(), path))

    def page_paths(self) -> list[str]:
        """The path of every request but robots.txt's (fetched once per worker: distributed
        mode obeys robots.txt), in the order they ended."""
        with self._lock:
            return [path for _s, _e, path in self.intervals if path != ROBOTS]

    def peak(self) -> int:
        """The most requests in flight at once, robots.txt's too, from the logged intervals."""
        events = sorted([(s, 1) for s, _e, _p in self.intervals]
                        + [(e, -1) for _s, e, _p in self.intervals], key=lambda x: (x[0], x[1]))
        now = best = 0
        for _at, step in events:
            now += step
            best = max(best, now)
        return best


def serve(directory: Path, *, latency: float) -> CountingServer:
    """Serve *directory* (a generated demo site) from a thread; ``close()`` it when done."""
    server = CountingServer(("127.0.0.1", 0), partial(_SlowHandler, directory=str(directory)),
                            latency=latency)
    server._thread = threading.Thread(target=server.serve_forever, name="counting-site",
                                      daemon=True)
    server._thread.start()
    return server
