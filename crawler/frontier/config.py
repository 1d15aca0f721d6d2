"""The Kafka frontier's settings, read and validated once at start-up (the shared
dupefilter's, ``BLOOM_*``, are :class:`crawler.dedup.dupefilter.BloomConfig`; the Redis
client's, ``REDIS_*`` and ``CONNECT_TIMEOUT``, :class:`crawler.connections.options.
RedisOptions`).

A setting that other readers need too has one reader function here, with its bounds:
:func:`heartbeat_interval`, :func:`session_timeout_ms`, :func:`lease_timeout`."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from scrapy import Request
from scrapy.settings import BaseSettings

from crawler.config import defaults
from crawler.config import readers as config
from crawler.config.readers import SettingError
from crawler.connections.clients import request_timeout_ms
from crawler.connections.kafka_topics import TopicPolicy
from crawler.connections.options import KafkaOptions, RedisOptions, connect_timeout
from crawler.frontier.canonical import DEFAULT as CANONICAL
from crawler.frontier.canonical import CanonicalRules
from crawler.frontier.partitioning import PARTITION_BY, partitioner
from crawler.frontier.seedrule import DEFAULT, SeedRule

MAX_BANDS = 8


def heartbeat_interval(settings: BaseSettings) -> float:
    """``CRAWL_HEARTBEAT_INTERVAL``: seconds between two heartbeats of a worker."""
    return config.get_float(settings, "CRAWL_HEARTBEAT_INTERVAL", minimum=0.1)


def session_timeout_ms(settings: BaseSettings) -> int:
    """``KAFKA_SESSION_TIMEOUT_MS``: how long the group waits for a silent member."""
    return config.get_int(settings, "KAFKA_SESSION_TIMEOUT_MS", minimum=1000)


def lease_timeout(settings: BaseSettings) -> float:
    """``KAFKA_LEASE_TIMEOUT``: seconds a request may stay in flight before it is re-queued."""
    return config.get_float(settings, "KAFKA_LEASE_TIMEOUT", minimum=1)


@dataclass(frozen=True, slots=True)
class FrontierConfig:
    crawl_id: str
    kafka: KafkaOptions
    redis: RedisOptions
    connect_timeout: float
    partitions: int
    topic_policy: TopicPolicy
    partition_by: str
    host_partitions: int
    buffer_size: int
    recent_window: int
    commit_interval: float
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    linger_ms: int
    send_backoff: float
    send_backoff_max: float
    lease_timeout: float
    idle_timeout: float
    heartbeat_interval: float
    local_capacity: int
    local_error_rate: float
    seed_claims: int = defaults.KAFKA_SEED_CLAIMS
    max_unacked: int = defaults.KAFKA_MAX_UNACKED
    state_lost: str = defaults.CRAWL_STATE_LOST  # repair | stop (crawler.recovery)
    fetch_max_bytes: int = defaults.KAFKA_FETCH_MAX_BYTES
    group_instance_id: str = defaults.KAFKA_GROUP_INSTANCE_ID  # "": dynamic membership
    close_timeout: float = 20.0  # not a setting: seconds for the last acks, then each client
    delivery_timeout: float = defaults.KAFKA_DELIVERY_TIMEOUT
    priority_bands: tuple[int, ...] = (1,)  # KAFKA_PRIORITY_BANDS, ascending
    min_share: float = defaults.KAFKA_PRIORITY_MIN_SHARE
    seed_rule: SeedRule = DEFAULT  # SEED_META_KEYS, SEED_REQUEST_FIELDS
    canonical: CanonicalRules = CANONICAL  # CANONICAL_*: the form seeds are taken in
    partition_key: Callable[[Request], bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_key", partitioner(self.partition_by,
                                                             self.host_partitions))

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    @property
    def requests_topic(self) -> str:
        return f"{self.crawl_id}.requests"

    @property
    def seeds_topic(self) -> str:
        return f"{self.crawl_id}.seeds"

    @property
    def dead_topic(self) -> str:
        return f"{self.crawl_id}.dead"

    @property
    def band_topics(self) -> tuple[str, ...]:
        """The request topics, lowest priority band first: ``<CRAWL_ID>.requests``, then
        ``<CRAWL_ID>.requests.1`` for priorities from the lowest threshold up, and so on."""
        extra = (f"{self.requests_topic}.{n}" for n in range(1, len(self.priority_bands) + 1))
        return (self.requests_topic, *extra)

    def request_topics_in(self, names: Iterable[str]) -> list[str]:
        """The crawl's request topics among *names*: every band, those no longer configured
        too (``<CRAWL_ID>.requests`` and ``<CRAWL_ID>.requests.<n>``), sorted."""
        bands = re.compile(re.escape(self.requests_topic) + r"(\.\d+)?")
        return sorted(name for name in names if bands.fullmatch(name))

    @property
    def urgent_topics(self) -> frozenset[str]:
        """Topics fetched even while the buffer is full: the bands above the lowest, seeds."""
        return frozenset((*self.band_topics[1:], self.seeds_topic))

    def band_of(self, priority: int) -> int:
        """The band of a request priority: how many thresholds it reaches (0: the lowest)."""
        return bisect.bisect_right(self.priority_bands, priority)

    def topic_for(self, request: Request) -> str:
        return self.band_topics[self.band_of(request.priority)]

    @property
    def topics(self) -> tuple[str, ...]:
        return (*self.band_topics, self.seeds_topic, self.dead_topic)

    @property
    def group_id(self) -> str:
        return f"{self.crawl_id}.workers"

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider_name: str) -> FrontierConfig:
        s = settings
        values = cls(
            crawl_id=config.crawl_id(s, spider_name),
            kafka=_kafka(s),
            redis=_redis(s),
            connect_timeout=connect_timeout(s),
            partitions=config.get_int(s, "KAFKA_PARTITIONS", minimum=1),
            topic_policy=TopicPolicy.from_settings(s),
            partition_by=config.get_choice(s, "KAFKA_PARTITION_BY", PARTITION_BY),
            host_partitions=config.get_int(s, "KAFKA_HOST_PARTITIONS", minimum=0),
            buffer_size=config.get_int(s, "KAFKA_BUFFER_SIZE", minimum=1),
            recent_window=config.get_int(s, "KAFKA_RECENT_WINDOW", minimum=0),
            commit_interval=config.get_float(s, "KAFKA_COMMIT_INTERVAL", minimum=0,
                                             exclusive_min=True),
            session_timeout_ms=session_timeout_ms(s),
            heartbeat_interval_ms=config.get_int(s, "KAFKA_HEARTBEAT_INTERVAL_MS", minimum=100),
            max_poll_interval_ms=config.get_int(s, "KAFKA_MAX_POLL_INTERVAL_MS", minimum=1000),
            linger_ms=config.get_int(s, "KAFKA_PRODUCER_LINGER_MS", minimum=0),
            send_backoff=config.get_float(s, "KAFKA_SEND_RETRY_BACKOFF", minimum=0,
                                          exclusive_min=True),
            send_backoff_max=config.get_float(s, "KAFKA_SEND_RETRY_BACKOFF_MAX", minimum=0,
                                              exclusive_min=True),
            lease_timeout=lease_timeout(s),
            idle_timeout=config.get_float(s, "CRAWL_IDLE_TIMEOUT", minimum=0),
            heartbeat_interval=heartbeat_interval(s),
            local_capacity=config.get_int(s, "BLOOM_LOCAL_CAPACITY", minimum=1),
            local_error_rate=config.get_float(s, "BLOOM_LOCAL_ERROR_RATE", minimum=0, maximum=0.5,
                                              exclusive_min=True),
            seed_claims=config.get_int(s, "KAFKA_SEED_CLAIMS", minimum=1),
            max_unacked=config.get_int(s, "KAFKA_MAX_UNACKED", minimum=1),
            state_lost=config.get_choice(s, "CRAWL_STATE_LOST", ("repair", "stop")),
            fetch_max_bytes=config.get_int(s, "KAFKA_FETCH_MAX_BYTES", minimum=1024),
            group_instance_id=config.get_str(s, "KAFKA_GROUP_INSTANCE_ID").strip(),
            delivery_timeout=config.get_float(s, "KAFKA_DELIVERY_TIMEOUT", minimum=1),
            priority_bands=_bands(s),
            min_share=config.get_float(s, "KAFKA_PRIORITY_MIN_SHARE", minimum=0, maximum=0.5),
            seed_rule=SeedRule.from_settings(s),
            canonical=CanonicalRules.from_settings(s),
        )
        values.check()
        return values

    def check(self) -> None:
        if self.heartbeat_interval_ms * 3 > self.session_timeout_ms:
            raise SettingError("KAFKA_HEARTBEAT_INTERVAL_MS",
                               "must be at most a third of KAFKA_SESSION_TIMEOUT_MS")
        if self.max_unacked <= 2 * self.buffer_size:  # each record held, and a send of each
            raise SettingError("KAFKA_MAX_UNACKED", f"must be more than twice KAFKA_BUFFER_SIZE "
                               f"({self.buffer_size}): a worker could stall for ever at the bound")
        if self.redis.max_connections <= self.seed_claims:
            raise SettingError("REDIS_MAX_CONNECTIONS", "must be larger than KAFKA_SEED_CLAIMS "
                               "(heartbeats and the dupefilter need connections too)")
        if self.delivery_timeout * 1000 < self.linger_ms + request_timeout_ms(self.connect_timeout):
            raise SettingError("KAFKA_DELIVERY_TIMEOUT",
                               "must be at least KAFKA_PRODUCER_LINGER_MS plus the request "
                               "timeout (CONNECT_TIMEOUT, 10 s at least)")
        if self.idle_timeout and self.idle_timeout < 2 * self.heartbeat_interval:
            raise SettingError("CRAWL_IDLE_TIMEOUT",
                               "must be 0 or at least twice CRAWL_HEARTBEAT_INTERVAL")


def _bands(settings: BaseSettings) -> tuple[int, ...]:
    """``KAFKA_PRIORITY_BANDS``: distinct integer thresholds, at most 8, sorted."""
    raw = config.raw(settings, "KAFKA_PRIORITY_BANDS")
    values = raw.split(",") if isinstance(raw, str) else raw
    try:
        if not isinstance(values, (list, tuple)) or any(isinstance(v, (bool, float))
                                                        for v in values):
            raise ValueError
        bands = sorted({int(str(value).strip()) for value in values if str(value).strip()})
    except ValueError:
        raise SettingError("KAFKA_PRIORITY_BANDS",
                           f"must be a list of integers, got {raw!r}") from None
    if len(bands) > MAX_BANDS:
        raise SettingError("KAFKA_PRIORITY_BANDS", f"at most {MAX_BANDS} thresholds")
    return tuple(bands)


def _kafka(settings: BaseSettings) -> KafkaOptions:
    """The worker's Kafka options; the frontier cannot run without ``KAFKA_BOOTSTRAP_SERVERS``."""
    _required(settings, "KAFKA_BOOTSTRAP_SERVERS")
    return KafkaOptions.from_settings(settings)


def _redis(settings: BaseSettings) -> RedisOptions:
    """The worker's Redis client options; the frontier cannot run without ``REDIS_URL``."""
    _required(settings, "REDIS_URL")
    return RedisOptions.from_settings(settings)


def _required(settings: BaseSettings, name: str) -> str:
    value = config.get_str(settings, name)
    if not value:
        raise SettingError(name, "is required by the Kafka frontier (setting or environment)")
    return value
