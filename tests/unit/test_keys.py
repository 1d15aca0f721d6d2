"""Every Redis key of a crawl comes from ``crawler.config.keys.CrawlKeys``, byte for byte the
keys existing crawls hold, and no module of ``crawler/`` builds one (or a worker id) by hand."""

from __future__ import annotations

import re
from pathlib import Path

import redis.asyncio as aioredis
from scrapy.settings import Settings

from crawler.config.keys import CrawlKeys, worker_id
from crawler.frontier import crawllife
from crawler.frontier.crawlstate import CrawlState
from crawler.politeness.proxypool import ProxyPool
from crawler.politeness.proxystore import RedisProxyStore
from crawler.politeness.ratelimiter import RateLimitConfig, RedisLimiter

PACKAGE = Path(__file__).resolve().parents[2] / "crawler"
KEYS_MODULE = PACKAGE / "config" / "keys.py"

# the keys existing crawls hold: changing one orphans their state
PINNED = {
    "prefix": "{c-1}:",
    "pattern": "{c-1}:*",
    "bloom": "{c-1}:bloom",
    "workers": "{c-1}:workers",
    "ledger": "{c-1}:ledger",
    "warc_digests": "{c-1}:warc:digests",
    "scope": "{c-1}:scope",
    "finished": "{c-1}:finished",
    "run_started": "{c-1}:run-started",
    "expiring": "{c-1}:expiring",
    "control": "{c-1}:control",
    "alerts": "{c-1}:alerts",
    "seed_claim_prefix": "{c-1}:seed:",
    "seed_key": "{c-1}:seedkey",
    "rebuild": "{c-1}:rebuild",
    "repair": "{c-1}:repair",
    "proxies": "{c-1}:proxies",
    "proxy_seeded": "{c-1}:proxy:seeded",
    "proxy_health": "{c-1}:proxy:health",
    "proxy_hosts": "{c-1}:proxy:hosts",
    "proxy_tombstone": "{c-1}:proxy:none",
    "host_slots_prefix": "{c-1}:slots:",
    "ratelimit_prefix": "{c-1}:ratelimit:",
    "ratelimit_overrides": "{c-1}:ratelimit:overrides",
    "ratelimit_adapted": "{c-1}:ratelimit:adapted",
    "recrawl": "{c-1}:recrawl",
    "recrawl_due": "{c-1}:recrawl:due",
    "seed_hosts": "{c-1}:seed-hosts",
}

# a crawl key or a worker id written out by hand, in the forms Python offers
HAND_BUILT = (
    re.compile(r"""\{\{\{[^{}'"]+\}\}\}"""),  # f"{{{crawl}}}:..."
    re.compile(r"""["']\{["']\s*\+"""),  # "{" + crawl + "}:..."
    re.compile(r"""["']\{(%s|\{\{\}\}\})"""),  # "{%s}:..." % crawl, "{{{}}}:...".format(crawl)
    re.compile(r"""\+\s*["']\}:"""),  # ... + "}:..."
    re.compile(r"gethostname\(\)\s*\}?\s*[:+\"'].*getpid\(\)"),  # f"{host}:{pid}..."
)


def test_every_key_of_a_crawl_is_pinned() -> None:
    keys = CrawlKeys("c-1")
    names = {n for n, v in vars(CrawlKeys).items() if isinstance(v, property)}
    assert names == set(PINNED), f"pin the new keys too: {sorted(names ^ set(PINNED))}"
    assert {n: getattr(keys, n) for n in PINNED} == PINNED


def test_per_item_keys() -> None:
    keys = CrawlKeys("c-1")
    assert keys.seed_claim("ab" * 20) == "{c-1}:seed:" + "ab" * 20
    assert keys.ratelimit_bucket("example.com") == "{c-1}:ratelimit:example.com"
    # the host "overrides" must not clash with the overrides hash
    assert keys.ratelimit_bucket("overrides") == "{c-1}:ratelimit:overrides."
    assert keys.ratelimit_bucket("adapted") == "{c-1}:ratelimit:adapted."
    assert keys.family("{c-1}:bloom:s0:3") == "bloom"
    assert keys.bloom_generation(7) == "{c-1}:bloom:g7"
    assert keys.family("{c-1}:bloom:g7:s0") == "bloom"
    assert keys.family("{c-1}:seed:abc") == "seed"
    assert keys.family("{c-1}:") == "?"
    assert keys.robots("http://a.test:80") == "{c-1}:robots:http://a.test:80"
    assert keys.robots_claim("http://a.test:80") == "{c-1}:robots-claim:http://a.test:80"
    assert keys.host_pages("a.test") == "{c-1}:budget:a.test"


def test_the_stores_use_those_keys() -> None:
    """Built on a client that never connects: constructors do no I/O."""
    client = aioredis.Redis(host="127.0.0.1", port=1)
    state = CrawlState(client, "c-1", stale_after=7.0)
    assert (state.key, state.control_key) == ("{c-1}:workers", "{c-1}:control")
    store = RedisProxyStore(ProxyPool(), client, "c-1")
    assert (store.members_key, store.seeded_key, store.health_key, store.tombstone_key) == (
        "{c-1}:proxies", "{c-1}:proxy:seeded", "{c-1}:proxy:health", "{c-1}:proxy:none")
    limiter = RedisLimiter(client, "c-1", RateLimitConfig.from_settings(Settings(), "spider"))
    assert limiter.overrides_key == "{c-1}:ratelimit:overrides"
    assert limiter.key("a.example") == "{c-1}:ratelimit:a.example"
    assert crawllife.family("c-1", "{c-1}:proxy:health") == "proxy"


def test_worker_id_is_one_per_process() -> None:
    assert re.fullmatch(r"[^:]+:\d+:[0-9a-f]{6}", worker_id())
    assert worker_id() == worker_id()


def hand_built(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()
            if any(p.search(line) for p in HAND_BUILT)]


def test_the_check_sees_every_hand_built_form() -> None:
    """The source check below would catch each way a key or an id was built before."""
    forms = ['key = f"{{{crawl_id}}}:workers"', "self.prefix = f'{{{crawl}}}'",
             'k = "{" + crawl + "}:bloom"', 'k = "{%s}:bloom" % crawl',
             'k = "{{{}}}:bloom".format(crawl)', 'k = prefix + "}:alerts"',
             'w = f"{socket.gethostname()}:{os.getpid()}"',
             'w = socket.gethostname() + ":" + str(os.getpid())']
    assert [f for f in forms if not hand_built(f)] == []
    fine = ['"pid": os.getpid(), "host": socket.gethostname(),',
            """'{"ts":' .. now .. ',"clock":"redis",' .. ARGV[2])""",
            'return self.prefix + "bloom"', 'f"{crawl}.requests"', 'json.loads("{}")']
    assert [f for f in fine if hand_built(f)] == []


def test_no_module_builds_a_crawl_key_or_a_worker_id_by_hand() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}: {line}"
        for path in sorted(PACKAGE.rglob("*.py")) if path != KEYS_MODULE
        for line in hand_built(path.read_text())
    }
    assert not found, "use crawler.config.keys (CrawlKeys, worker_id):\n" + "\n".join(
        sorted(found))
