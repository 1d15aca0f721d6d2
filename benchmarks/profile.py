"""Where a worker's CPU goes, by component: py-spy's samples of one process, each given to
the component of its innermost frame in this package.

``py-spy record --format raw`` writes one line per distinct stack, ``frame;frame;... count``,
outermost frame first, active samples only; yet a thread blocked in ``epoll`` or a
condition's wait shows up now and then, and such samples are counted apart
(:data:`WAITING`) and given no CPU. A sample belongs to the component whose module is the
innermost frame of this package on its stack (:data:`COMPONENTS`): ``json.dumps`` under the
codec is the frontier's, redis-py under the Bloom filter's ``check`` is dedup's,
kafka-python in the consumer loop's thread is the frontier's. A stack with no frame of this
package is Scrapy's (Scrapy, Twisted, asyncio, lxml, w3lib...), but the spider's own frames,
which are the spider's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: (path fragment, component), the first that a frame's file contains wins; "" is no
#: component: the commands' frames (``scrapy crawl``, ``runspider``) hold every stack of the
#: main thread, so the frames inside them say whose a sample is
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("crawler/commands/", ""),
    ("crawler/frontier/accounting.py", "ledger"),
    ("crawler/middlewares/ledger.py", "ledger"),
    ("crawler/ledger/", "ledger"),
    ("crawler/statusindex/", "status index"),
    ("crawler/frontier/", "frontier"),
    ("crawler/_scrapy.py", "frontier"),
    ("crawler/dedup/", "dedup"),
    ("crawler/politeness/", "politeness"),
    ("crawler/middlewares/", "politeness"),  # retries, rate limit, proxies, robots, the guard
    ("crawler/storage/", "storage"),
    ("crawler/pipelines/", "storage"),
    ("crawler/extensions/", "operations"),
    ("crawler/operations/", "operations"),
    ("crawler/", "other crawler code"),
    ("benchmarks/spider.py", "spider"),
)
SCRAPY = "Scrapy (and what it runs)"
#: samples of a thread blocked in a wait: py-spy takes some for active (the reactor's epoll,
#: a client thread's condition); they are counted apart and given no CPU
WAITING = "waiting"
_WAITS = (("selectors.py", "select"), ("threading.py", "wait"), ("threading.py", "join"))
ORDER = ("frontier", "dedup", "politeness", "ledger", "status index", "storage", "operations",
         "other crawler code", "spider", SCRAPY)
_FILE = re.compile(r"\(([^():]+\.py)(?::\d+)?\)$")


def component(frame: str) -> str | None:
    """The component of one py-spy frame (``function (path/file.py:line)``), or None."""
    match = _FILE.search(frame)
    if match is None:
        return None
    path = match[1].replace("\\", "/")
    return next((name for fragment, name in COMPONENTS if fragment in path), None) or None


def attribute(lines: Iterable[str]) -> Counter[str]:
    """Samples per component of py-spy's raw (folded) output."""
    found: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if is_wait(frames[-1]):
            found[WAITING] += int(count)
            continue
        owner = next((c for f in reversed(frames) if (c := component(f))), SCRAPY)
        found[owner] += int(count)
    return found


def is_wait(frame: str) -> bool:
    """Whether *frame* (a stack's innermost) blocks: ``EpollSelector.select (selectors.py)``,
    ``Condition.wait (threading.py)``..."""
    match = _FILE.search(frame)
    if match is None:
        return False
    function = frame[:match.start()].strip().rpartition(".")[2]
    return any(match[1].endswith("/" + f) or match[1] == f
               for f, name in _WAITS if function == name)


def record(pid: int, out: Path, rate: int = 100) -> subprocess.Popen[bytes] | None:
    """Start py-spy sampling *pid* into *out* (raw format) until the process exits; None
    where py-spy is not installed."""
    spy = shutil.which("py-spy") or _beside_python("py-spy")
    if spy is None:
        return None
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
         "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _beside_python(name: str) -> str | None:
    found = Path(sys.executable).with_name(name)
    return str(found) if found.exists() else None


def ms_per_page(samples: Counter[str], cpu_s: float, pages: int) -> dict[str, float]:
    """Each component's share of the samples, as milliseconds of CPU per page (the
    :data:`WAITING` samples get none)."""
    total = sum(n for name, n in samples.items() if name != WAITING)
    if not total or not pages:
        return {}
    return {name: 1000 * cpu_s * samples[name] / total / pages
            for name in ORDER if samples.get(name)}
