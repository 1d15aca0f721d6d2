"""A deterministic synthetic website for benchmarks.

Page 0 is ``index.html`` (URL ``<base>/``), page *n* is ``p/<n>.html``. Every page links to
its tree children ``4n+1 .. 4n+4`` (so the index reaches every page), to the index, and to
pseudo-random pages up to *links* links in all; its body is padded with words to a size drawn
between *min_bytes* and *max_bytes*. The same parameters and seed always give the same bytes::

    python -m benchmarks.sitegen --pages 20000 --links 11 --min-bytes 5000 --max-bytes 10000 DIR
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CHILDREN = 4
_WORDS = (
    "crawler frontier kafka redis mongo bloom filter spider request response item pipeline "
    "scheduler worker partition offset lease retry backoff politeness robots sitemap anchor "
    "document index shard replica cluster broker topic consumer producer latency throughput"
).split()


@dataclass(frozen=True)
class SiteSpec:
    pages: int = 20_000
    links: int = 11  # links per page: tree children, the index, the rest random
    min_bytes: int = 5_000
    max_bytes: int = 10_000
    seed: int = 1

    def validate(self) -> None:
        if self.pages < 1:
            raise ValueError(f"pages must be >= 1, got {self.pages}")
        if self.links < CHILDREN + 1:
            raise ValueError(f"links must be >= {CHILDREN + 1}, got {self.links}")
        if not 0 < self.min_bytes <= self.max_bytes:
            raise ValueError(f"need 0 < min_bytes <= max_bytes, got {self.min_bytes}, "
                             f"{self.max_bytes}")


def page_path(n: int) -> str:
    return "index.html" if n == 0 else f"p/{n}.html"


def page_url(base: str, n: int) -> str:
    return f"{base.rstrip('/')}/" if n == 0 else f"{base.rstrip('/')}/p/{n}.html"


def targets(n: int, spec: SiteSpec, rng: random.Random) -> list[int]:
    """The pages page *n* links to, in link order."""
    children = [c for c in range(CHILDREN * n + 1, CHILDREN * n + CHILDREN + 1) if c < spec.pages]
    extra = spec.links - len(children) - 1
    return children + [rng.randrange(spec.pages) for _ in range(extra)] + [0]


def render(n: int, spec: SiteSpec) -> bytes:
    """The HTML of page *n*."""
    rng = random.Random(spec.seed * 1_000_003 + n)
    links = "".join(
        f'<li><a href="{"/" if t == 0 else f"/p/{t}.html"}">Page {t}</a></li>\n'
        for t in targets(n, spec, rng)
    )
    head = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Page {n}</title>"
            f"</head>\n<body><h1>Page {n}</h1>\n<ul>\n{links}</ul>\n")
    size = rng.randint(spec.min_bytes, spec.max_bytes)
    words: list[str] = []
    length = len(head) + 30
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return (head + "<p>" + " ".join(words) + "</p>\n</body></html>\n").encode()


def generate(directory: Path, spec: SiteSpec) -> Path:
    """Write the site into *directory* (replacing it) with a ``site.json`` describing it."""
    spec.validate()
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    (directory / "p").mkdir(parents=True)
    for n in range(spec.pages):
        (directory / page_path(n)).write_bytes(render(n, spec))
    (directory / "site.json").write_text(json.dumps(asdict(spec)))
    return directory


def ensure(directory: Path, spec: SiteSpec) -> Path:
    """*directory* holding exactly the site of *spec*, generated only if it does not yet."""
    marker = Path(directory) / "site.json"
    if marker.exists() and json.loads(marker.read_text()) == asdict(spec):
        return Path(directory)
    return generate(directory, spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--pages", type=int, default=SiteSpec.pages)
    parser.add_argument("--links", type=int, default=SiteSpec.links)
    parser.add_argument("--min-bytes", type=int, default=SiteSpec.min_bytes)
    parser.add_argument("--max-bytes", type=int, default=SiteSpec.max_bytes)
    parser.add_argument("--seed", type=int, default=SiteSpec.seed)
    args = parser.parse_args(argv)
    spec = SiteSpec(args.pages, args.links, args.min_bytes, args.max_bytes, args.seed)
    generate(args.directory, spec)
    print(f"{spec.pages} pages in {args.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
