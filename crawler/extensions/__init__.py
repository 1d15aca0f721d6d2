"""Scrapy extensions of the crawler (``EXTENSIONS`` entries)."""
