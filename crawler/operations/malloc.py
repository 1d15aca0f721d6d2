"""How many malloc arenas a worker process keeps (glibc): its peak RSS.

glibc gives a thread that allocates while another holds the main arena an arena of its
own, up to eight per core. A worker's client threads (Kafka's consumer and producer,
pymongo's monitors and pool, ``asyncio.to_thread``) each fill one, and memory freed in an
arena is kept there for that arena's next allocations, so each arena holds its own slack.
``MALLOC_ARENA_MAX`` caps them (glibc's ``mallopt(M_ARENA_MAX)``): at 2 a worker's peak RSS
fell from 161 to 156 MiB in the benchmark (one run each, 20,000 pages), while the threads,
which seldom allocate at once, barely contend. glibc reads an environment variable of the
same name when the process starts; where it is set, it wins and nothing is changed here.
Elsewhere than on glibc the setting does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

logger = logging.getLogger(__name__)
M_ARENA_MAX = -8  # malloc.h


def limit_arenas(count: int) -> bool:
    """Cap the process's malloc arenas at *count* (0: leave glibc's default); whether the
    cap is now set. Arenas made before the call stay; call it before threads start."""
    if count <= 0 or "MALLOC_ARENA_MAX" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None:
        return False
    return bool(mallopt(M_ARENA_MAX, count))
