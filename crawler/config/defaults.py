"""Every setting of the crawler and its default, in one place.

Each component reads its settings through :mod:`crawler.config.readers`, which falls back
to these values. ``docs/settings.md`` documents each of them.
"""

from __future__ import annotations

from typing import Any

# --- connections (also read from the environment variable of the same name) ---
KAFKA_BOOTSTRAP_SERVERS = ""
KAFKA_SECURITY_PROTOCOL = "PLAINTEXT"  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
KAFKA_SSL_CAFILE = ""  # empty: the system's CAs
KAFKA_SSL_CERTFILE = ""  # client certificate (PEM), for brokers that ask for one
KAFKA_SSL_KEYFILE = ""
KAFKA_SSL_CHECK_HOSTNAME = True
KAFKA_SASL_MECHANISM = ""  # PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 | OAUTHBEARER
KAFKA_SASL_USERNAME = ""
KAFKA_SASL_PASSWORD = ""
KAFKA_SASL_OAUTH_TOKEN_PROVIDER = ""  # class path; its instance's token() gives the token
KAFKA_CLIENT_PARAMS: dict[str, Any] = {}  # passed to every Kafka client, last
REDIS_URL = ""
REDIS_PARAMS: dict[str, Any] = {}
REDIS_MAX_CONNECTIONS = 50  # per Redis client; a call waits for a free one instead of failing
MONGO_URI = ""
MONGO_DATABASE = "crawler"
MONGO_PARAMS: dict[str, Any] = {}  # extra MongoClient options (tlsCAFile, authSource...)
CRAWL_ID = ""  # empty: the spider's name

# --- start-up ---
CONNECT_TIMEOUT = 5.0  # seconds a service may take to answer at start-up
MALLOC_ARENA_MAX = 2  # a distributed worker's malloc arenas (glibc); 0: glibc's default
CLIENT_LOG_LEVEL = "info"  # the lowest level of kafka-python's and pymongo's lines in the log

# --- Kafka frontier ---
KAFKA_PARTITIONS = 12
KAFKA_REPLICATION_FACTOR = 0  # topics the crawler creates; 0: the cluster's default
KAFKA_MIN_INSYNC_REPLICAS = 0  # 0: 2 on a replicated topic (acks=all = two copies)
KAFKA_TOPIC_CONFIG: dict[str, str] = {}  # added to (or over) retention.ms/bytes=-1, delete
KAFKA_PARTITION_BY = "host"  # host | domain | url: the unit KAFKA_HOST_PARTITIONS spreads
KAFKA_HOST_PARTITIONS = 0  # partitions one host (domain) is spread over; 0 = all, 1 = one
KAFKA_PRIORITY_BANDS: list[int] = [1]  # priority thresholds: a request topic per band above
KAFKA_PRIORITY_MIN_SHARE = 0.1  # share of a worker's requests lower bands get while they wait
KAFKA_BUFFER_SIZE = 256  # requests buffered locally per worker
KAFKA_FETCH_MAX_BYTES = 1024 * 1024  # record bytes one fetch brings (kafka-python: 50 MiB)
KAFKA_GROUP_INSTANCE_ID = ""  # this worker's static group membership (KIP-345); "": none
KAFKA_RECENT_WINDOW = 50_000  # consumed fingerprints remembered to drop a raced copy; 0 = off
KAFKA_COMMIT_INTERVAL = 1.0  # seconds between offset commits
KAFKA_SESSION_TIMEOUT_MS = 6000
KAFKA_HEARTBEAT_INTERVAL_MS = 250  # a member learns of a rebalance (a worker joining) within this
KAFKA_MAX_POLL_INTERVAL_MS = 300000
KAFKA_PRODUCER_LINGER_MS = 5
KAFKA_SEND_RETRY_BACKOFF = 1.0  # seconds before a failed send is tried again (doubles, capped)
KAFKA_SEND_RETRY_BACKOFF_MAX = 30.0
KAFKA_LEASE_TIMEOUT = 600.0  # seconds a request may stay in flight before it is re-produced
SEED_SCOPE = "add"  # scrapy seed, a seed outside the crawl's scope: add its host | reject
KAFKA_SEED_CLAIMS = 16  # seed records claimed in Redis at once per worker
SEED_META_KEYS: list[str] = [  # meta keys a seed from outside the crawl may set; "*": any
    "depth_limit", "recrawl_after"]
SEED_REQUEST_FIELDS: list[str] = []  # fields beyond url/priority/meta it may set (headers...)
KAFKA_DELIVERY_TIMEOUT = 120.0  # seconds a send may wait for its ack; then it is sent again
KAFKA_MAX_UNACKED = 2000  # leases + follow-up sends not yet acknowledged; above: fetching pauses

# --- canonical URLs and URL traps (docs/urls.md) ---
CANONICAL_DROP_PARAMS: list[str] = [  # query and ;path parameters removed (globs, any case)
    "utm_*", "gclid", "fbclid", "jsessionid", "phpsessid", "sid", "sessionid"]
CANONICAL_SORT_QUERY = False  # True: the query's parameters in sorted order
URLTRAP_MAX_SEGMENT_REPEATS = 3  # a path with one segment more often than this: a trap; 0 = off

# --- SSRF guard (docs/security.md) ---
BLOCKED_NETWORKS: list[str] = [  # CIDRs no request may connect to
    "169.254.0.0/16", "fe80::/10", "100.100.100.200/32", "fd00:ec2::254/128"]
BLOCK_PRIVATE_NETWORKS = True  # loopback, RFC 1918, CGNAT, link-local, unique-local, multicast
# closed too, but to the hosts of the operator's seeds
ALLOWED_NETWORKS: list[str] = []  # CIDRs opened in the private ones (BLOCKED_NETWORKS wins)

# --- crawl lifecycle ---
CRAWL_IDLE_TIMEOUT = 30.0  # seconds the whole crawl must be drained before workers exit; 0 = never
CRAWL_HEARTBEAT_INTERVAL = 1.0  # seconds between worker heartbeats in Redis
CRAWL_STATE_TTL = 604800.0  # seconds a finished crawl's Redis keys live (7 days); 0 = for ever

# --- Redis Bloom dupefilter ---
FRONTIER_DEDUP_CLASS = "crawler.dedup.RedisBloom"  # the Kafka frontier's shared dupefilter
BLOOM_CAPACITY = 10_000_000  # fingerprints the first slice holds at BLOOM_ERROR_RATE
BLOOM_ERROR_RATE = 0.001  # target false-positive rate of the whole filter
BLOOM_GROWTH = 2  # each new slice holds this many times the previous one
BLOOM_ON_MISSING = "pause"  # the filter vanished from Redis: pause | recreate (start over)
CRAWL_STATE_LOST = "repair"  # Redis lost a crawl that exists in Kafka/MongoDB: repair | stop
BLOOM_LOCAL_CAPACITY = 1_000_000  # fingerprints of one generation of the local pre-filter
BLOOM_LOCAL_ERROR_RATE = 0.000001

# --- MongoDB pipeline ---
MONGO_BATCH_SIZE = 100  # items per bulk write
MONGO_BATCH_TIMEOUT = 0.2  # seconds an item may wait for its batch
MONGO_KEY_FIELDS: list[str] = ["url"]
MONGO_WRITE_CONCERN = "majority"  # w= value: "majority", or a number of nodes
MONGO_JOURNAL = True
MONGO_RETRY_BACKOFF = 0.5  # seconds before the first retry of a failed write (doubles)
MONGO_RETRY_BACKOFF_MAX = 30.0
MONGO_INDEXES: list[str] = ["url", "fetched_at"]
MONGO_TIMEOUT = 30.0  # seconds MongoDB may take to answer any command (socket timeout)
MONGO_WRITE_TIMEOUT = 20.0  # seconds a write may wait for its write concern (wtimeout)
MONGO_INDEX_TIMEOUT = 300.0  # seconds the index creation at start-up may take

# --- per-URL status index (MongoDB <CRAWL_ID>.urls; scrapy cluster trace) ---
STATUS_INDEX_ENABLED = True  # distributed mode: record each URL's life
STATUS_INDEX_TTL = 2_592_000.0  # seconds a URL's record lives after its last event (30 days)
STATUS_INDEX_INTERVAL = 0.25  # seconds between the index's batched writes

# --- single-node mode ---
LOCAL_ITEMS_PATH = "output/%(crawl_id)s.jsonl"

# --- backoff retries ---
# (RETRY_TIMES and RETRY_PRIORITY_ADJUST are Scrapy's settings, with Scrapy's defaults)
RETRY_BACKOFF_ENABLED = False  # True: BackoffRetryMiddleware replaces Scrapy's RetryMiddleware
RETRY_BACKOFF_BASE = 1.0  # seconds: the first retry waits up to this long (doubles each retry)
RETRY_BACKOFF_MAX = 60.0  # seconds: the largest backoff ceiling
RETRY_AFTER_MAX = 120.0  # seconds: the longest Retry-After honoured (longer ones are capped)
RETRY_STATUS_OVERRIDES: dict[str, str] = {}  # {"404": "backoff", "dns": "none", ...}
RETRY_LATER_TIMES = 6  # retries of "come back later" answers (RETRY_LATER_STATUSES, Retry-After)
RETRY_LATER_STATUSES: list[int] = [429, 502, 503, 504]
RETRY_NETWORK_TIMES = 4  # retries of the origin's network errors (resets, timeouts, refusals)
RETRY_MAX_TIME = 300.0  # seconds one request may spend on retries, waits included

# --- robots.txt, once per host for the cluster (RFC 9309; ROBOTSTXT_OBEY is Scrapy's) ---
ROBOTSTXT_TTL = 86400.0  # seconds a robots.txt is used before it is fetched again (RFC: 24 h)
ROBOTSTXT_RETRY_AFTER = 30.0  # seconds a 5xx/429/unreachable robots.txt disallows its host
ROBOTSTXT_RETRIES = 4  # unreachable this many times in a row: the host's requests are dropped
ROBOTSTXT_MAX_SIZE = 512000  # bytes of a robots.txt parsed (RFC: at least 500 KiB)
ROBOTSTXT_MAX_REDIRECTS = 5  # redirects followed to a robots.txt; more: no rules (allow)
ROBOTSTXT_CRAWL_DELAY_MAX = 30.0  # seconds: the longest Crawl-delay honoured; 0: ignored

# --- sitemaps (docs/robots.md) ---
SITEMAP_DISCOVERY = True  # follow the Sitemap: lines of each host's robots.txt
SITEMAP_MAX_SIZE = 52428800  # bytes of one sitemap, unpacked (the protocol's 50 MB)
SITEMAP_MAX_URLS = 50000  # entries read from one sitemap (the protocol's limit)
SITEMAP_LASTMOD_AFTER = ""  # an ISO date: pages whose lastmod is older are skipped

# --- per-host page budget ---
HOST_PAGE_BUDGET = 0  # pages of one host a crawl fetches at most; 0: no limit

# --- cluster-wide per-host limits (with the Kafka frontier) ---
HOSTLIMIT_ENABLED = True  # every worker of a crawl shares each host's concurrency and delay
HOSTLIMIT_CONCURRENCY = 0  # in flight to a host, cluster-wide; 0: CONCURRENT_REQUESTS_PER_DOMAIN
HOSTLIMIT_DELAY = -1.0  # seconds between two requests to a host, cluster-wide; -1: DOWNLOAD_DELAY
HOSTLIMIT_TTL = 5.0  # seconds a worker's shares live unrenewed (a killed worker's are free after)
HOSTLIMIT_INTERVAL = 0.5  # seconds between two renewals of a worker's shares (one round trip)
HOSTLIMIT_DELAY_FACTOR = 0.0  # gap = this times the host's recent latency (Heritrix's); 0: off
HOSTLIMIT_DELAY_MAX = 30.0  # seconds: the cap of that gap
POLITENESS_UNIT = "host"  # what the per-host limits count against: host, domain or ip

# --- per-host circuit breaker ---
HOSTBREAKER_FAILURES = 5  # network failures in a row that pause a host; 0: no breaker
HOSTBREAKER_PAUSE = 15.0  # seconds a paused host waits before one request probes it
HOSTBREAKER_PAUSE_MAX = 240.0  # the pause doubles at each failed probe, up to this
HOSTBREAKER_GIVE_UP = 900.0  # seconds paused after which its requests are dropped; 0: never

# --- per-domain rate limit ---
RATELIMIT_ENABLED = False  # distributed mode switches it on: RateLimitMiddleware, per-host rates
RATELIMIT_RATE = 0.0  # tokens (requests) per second per host; 0: none but Crawl-delays, DOMAINS
RATELIMIT_BURST = 2.0  # tokens a host's bucket holds: requests that may go at once
RATELIMIT_DOMAINS: dict[str, dict[str, float]] = {}  # {"example.com": {"rate": 2, "burst": 4}}
RATELIMIT_MAX_WAIT = 60.0  # seconds a request may reserve ahead; later ones come back unreserved
RATELIMIT_ADAPTIVE = True  # lower a host's rate on RATELIMIT_DECREASE_ON, recover on success
RATELIMIT_DECREASE_ON: list[int] = [429, 503]  # statuses that lower the rate
RATELIMIT_DECREASE_FACTOR = 0.5  # the rate is multiplied by this on such a status
RATELIMIT_MIN_RATE = 0.05  # tokens per second: the adaptive floor
RATELIMIT_RECOVER_AFTER = 20  # consecutive successes before the rate steps up
RATELIMIT_RECOVER_STEP = 0.1  # each step adds this fraction of the configured rate
RATELIMIT_STATE_TTL = 3600.0  # seconds a host's lowered rate is remembered once idle
RATELIMIT_UNRATED_RATE = 2.0  # requests/s a host with no rate gets when it answers 429/503
RATELIMIT_RETRY_BACKOFF = 0.5  # seconds before Redis is tried again (doubles, capped)
RATELIMIT_RETRY_BACKOFF_MAX = 30.0

# --- proxy pool ---
PROXY_ENABLED = False  # True: ProxyPoolMiddleware sends requests through the pool
ROTATING_PROXY_LIST: list[str] = []  # proxy addresses, [scheme://][user:pass@]host:port
ROTATING_PROXY_LIST_PATH = ""  # a file of proxy addresses, one per line ("#" comments)
PROXY_STORE = ""  # class path; empty: RedisProxyStore when REDIS_URL is set, else in-process
PROXY_BAN_POLICY = "crawler.politeness.banpolicy.BanPolicy"
ROTATING_PROXY_BAN_POLICY = ""  # scrapy-rotating-proxies' name; used when PROXY_BAN_POLICY is not
PROXY_WHEN_NONE = "wait"  # no usable proxy: wait | direct | fail
PROXY_RETRIES = 5  # re-issues through another proxy of a request failed by its proxy
PROXY_REFRESH_INTERVAL = 1.0  # seconds between syncs with the shared store (and after bans)
PROXY_WAIT_MAX = 30.0  # seconds a request waits at most before it looks for a proxy again
PROXY_EWMA_ALPHA = 0.3  # weight of a new observation in the moving averages
PROXY_LATENCY_REF = 1.0  # seconds of latency that halve a proxy's score
PROXY_MIN_SUCCESS = 0.1  # a success-rate average below this kills the proxy
PROXY_BACKOFF_BASE = 5.0  # seconds to a dead proxy's first probe (doubles per death, failed probe)
PROXY_BACKOFF_MAX = 300.0  # cap of that pause
PROXY_PROBE_URL = ""  # empty: probe with a CONNECT to the latest host answered; or a URL to GET
PROXY_PROBE_TIMEOUT = 5.0  # seconds a probe may take
PROXY_PROBATION_SUCCESSES = 2  # successes that make a proxy on probation alive again
PROXY_BACKOFF_RESET = 20  # successes in a row that reset the pause to PROXY_BACKOFF_BASE
USERAGENT_ROTATION_ENABLED = False  # True: UserAgentRotationMiddleware picks from USERAGENT_LIST
USERAGENT_LIST: list[str] = []  # User-Agent strings to rotate over

# --- metrics ---
METRICS_ENABLED = False  # True: MetricsExporter serves Prometheus metrics
METRICS_HOST = "127.0.0.1"  # address the metrics HTTP server listens on
METRICS_PORT = 0  # 0: a free port, logged and stored in the stats as metrics/port

# --- alerts ---
ALERTS_ENABLED = False  # True: AlertsExtension checks the alert rules (on in distributed mode)
ALERT_INTERVAL = 10.0  # seconds between two checks of the rules, in every worker
ALERT_FAILURE_RATE = 0.05  # failures / (pages + failures) of this worker above this: alert
ALERT_LAG_GROWING_MINUTES = 10.0  # crawl lag not falling (and higher) for this long: alert
ALERT_MIN_PROXIES = 1  # fewer alive proxies than this: alert (only with the proxy pool)
ALERT_BLOOM_FILL = 0.9  # Bloom filter fill (items / capacity of its slices) above this: alert
ALERT_NODE_SILENT_SECONDS = 30.0  # a heartbeat older than this in {CRAWL_ID}:workers: alert
ALERT_TTL = 60.0  # seconds an alert stays in {CRAWL_ID}:alerts unless refreshed
ALERT_WEBHOOK_URL = ""  # POST each alert as JSON here when it becomes active; empty: none
ALERT_WEBHOOK_TIMEOUT = 5.0  # seconds the webhook POST may take

# --- recrawl (docs/recrawl.md) ---
RECRAWL_AFTER = 0.0  # seconds after which a URL seen before is fetched again; 0 = never

# --- logs ---
DOWNLOAD_ERROR_TRACEBACKS = False  # True: a timeout, reset or size cut logs its traceback

# --- browser rendering (docs/browser.md; needs the browser extra) ---
BROWSER_ENABLED = False  # True: requests with meta["playwright"] are rendered in Chromium
BROWSER_EXECUTABLE = "chromium"  # Chromium's path, or a name looked up on PATH
BROWSER_CONCURRENCY = 4  # pages open at once in one worker, every browser context together

# --- tracing (docs/tracing.md; needs the otel extra; also read from the environment variable) ---
OTEL_EXPORTER_OTLP_ENDPOINT = ""  # an OTLP/HTTP receiver, http://host:4318; empty: no tracing
OTEL_SERVICE_NAME = "scrapy-fleet"  # the spans' service.name

# --- WARC archive (docs/warc.md) ---
WARC_ENABLED = False  # True: each fetched page's request and response go to WARC files
WARC_DIR = "warc"  # the directory of this worker's WARC files (relative: to the working dir)
WARC_PREFIX = ""  # the start of each WARC file's name; empty: the crawl id
WARC_MAX_SIZE = 1_000_000_000  # bytes (gzipped) after which a WARC file is closed (Heritrix's)
WARC_FLUSH_INTERVAL = 0.05  # seconds between two fsyncs; the pages waiting meanwhile share one
