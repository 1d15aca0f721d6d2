"""Operations: what operators see of a running crawl.

- :mod:`~crawler.operations.clusterview`: reads workers' heartbeats into a status.
- :mod:`~crawler.operations.proxyview`: proxy failures by the party at fault, in that status.
- :mod:`~crawler.operations.dashboard`: the status served as a web page.
- :mod:`~crawler.operations.alert_rules`: the alert rules (pure logic).
"""

from crawler.operations.alert_rules import Alert, AlertInput, Thresholds, evaluate
from crawler.operations.clusterview import RateTracker, Snapshot, build_status, render_text

__all__ = ["Alert", "AlertInput", "RateTracker", "Snapshot", "Thresholds", "build_status",
           "evaluate", "render_text"]
