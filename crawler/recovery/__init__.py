"""Nothing lost when Redis forgets: a crawl's lost Redis state noticed and repaired.

- :class:`~crawler.recovery.guard.StateGuard`: detection, the ERROR line, repair or stop
  (``CRAWL_STATE_LOST``);
- :mod:`~crawler.recovery.rebuild`: the Bloom filter rebuilt from MongoDB and Kafka;
- :class:`~crawler.recovery.mirror.StateMirror`: the seed key and finished record kept in
  MongoDB too;
- :mod:`~crawler.recovery.kafka_read`: committed offsets and unfinished records.
"""

from crawler.recovery.guard import MODES, CrawlStateLost, Evidence, StateGuard, watch_filter
from crawler.recovery.mirror import StateMirror

__all__ = ["MODES", "CrawlStateLost", "Evidence", "StateGuard", "StateMirror", "watch_filter"]
