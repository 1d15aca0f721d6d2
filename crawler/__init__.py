"""crawler: distributed Scrapy crawling through Kafka, Redis and MongoDB."""

__version__ = "0.1.0"
