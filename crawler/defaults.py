"""Every setting of the crawler and its default, in one place.

Each component reads its settings through :mod:`crawler.config`, which falls back
to these values. ``docs/settings.md`` documents each of them.
"""

from __future__ import annotations

from typing import Any

# --- connections (also read from the environment variable of the same name) ---
KAFKA_BOOTSTRAP_SERVERS = ""
REDIS_URL = ""
REDIS_PARAMS: dict[str, Any] = {}
MONGO_URI = ""
MONGO_DATABASE = "crawler"
CRAWL_ID = ""  # empty: the spider's name

# --- start-up ---
CONNECT_TIMEOUT = 5.0  # seconds a service may take to answer at start-up

# --- Kafka frontier ---
KAFKA_PARTITIONS = 12
KAFKA_REPLICATION_FACTOR = 1
KAFKA_PARTITION_BY = "host"  # host | domain | url
KAFKA_BUFFER_SIZE = 256  # requests buffered locally per worker
KAFKA_COMMIT_INTERVAL = 1.0  # seconds between offset commits
KAFKA_SESSION_TIMEOUT_MS = 6000
KAFKA_HEARTBEAT_INTERVAL_MS = 1000
KAFKA_MAX_POLL_INTERVAL_MS = 300000
KAFKA_PRODUCER_LINGER_MS = 5
KAFKA_SEND_RETRY_BACKOFF = 1.0  # seconds before a failed send is tried again (doubles, capped)
KAFKA_SEND_RETRY_BACKOFF_MAX = 30.0
KAFKA_LEASE_TIMEOUT = 600.0  # seconds a request may stay in flight before it is re-produced

# --- crawl lifecycle ---
CRAWL_IDLE_TIMEOUT = 30.0  # seconds the whole crawl must be drained before workers exit; 0 = never
CRAWL_HEARTBEAT_INTERVAL = 1.0  # seconds between worker heartbeats in Redis

# --- Redis Bloom dupefilter ---
BLOOM_CAPACITY = 10_000_000  # fingerprints the first slice holds at BLOOM_ERROR_RATE
BLOOM_ERROR_RATE = 0.001  # target false-positive rate of the whole filter
BLOOM_GROWTH = 2  # each new slice holds this many times the previous one
BLOOM_LOCAL_CAPACITY = 1_000_000  # per-worker pybloom-live pre-filter
BLOOM_LOCAL_ERROR_RATE = 0.000001

# --- MongoDB pipeline ---
MONGO_BATCH_SIZE = 100  # items per bulk write
MONGO_BATCH_TIMEOUT = 0.2  # seconds an item may wait for its batch
MONGO_KEY_FIELDS: list[str] = ["url"]
MONGO_WRITE_CONCERN = "majority"  # w= value: "majority", or a number of nodes
MONGO_JOURNAL = True
MONGO_RETRY_BACKOFF = 0.5  # seconds before the first retry of a transient error (doubles)
MONGO_RETRY_BACKOFF_MAX = 30.0
MONGO_INDEXES: list[str] = ["url", "fetched_at"]

# --- single-node mode ---
LOCAL_ITEMS_PATH = "output/%(crawl_id)s.jsonl"
