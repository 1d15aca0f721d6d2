"""Made-up host names for a worker, for tests that need several names of one loopback server.

Python imports ``sitecustomize`` at start-up from ``sys.path``; a test puts this directory on
the worker's ``PYTHONPATH`` and names the mapping in ``FAKE_DNS``
(``a.example.com=127.0.0.1,b.example.com=127.0.0.1``). Each listed name then resolves to its
address through ``socket.getaddrinfo``, which Twisted's resolver calls in a thread, so the
worker's guarded resolver and politeness unit see an ordinary lookup. Every other name
resolves as before. :func:`tests.servers.fakedns.worker_env` builds the variables.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_NAMES = dict(pair.split("=", 1) for pair in os.environ.get("FAKE_DNS", "").split(",")
              if "=" in pair)

if _NAMES:
    _resolve = socket.getaddrinfo

    def _getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if isinstance(name, str):
            host = _NAMES.get(name.lower().rstrip("."), host)
        return _resolve(host, *args, **kwargs)

    socket.getaddrinfo = _getaddrinfo
