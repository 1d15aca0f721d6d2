"""Operations: what operators see of a running crawl.

- :mod:`~crawler.operations.clusterview`: reads workers' heartbeats into a status.
- :mod:`~crawler.operations.dashboard`: the status served as a web page.
- :mod:`~crawler.operations.alert_rules`: the alert rules (pure logic).
"""
