"""Pages rendered in a browser: scrapy-playwright driving Chromium (docs/browser.md).

- ``config.py``: the ``BROWSER_*`` settings read once (:class:`BrowserConfig`), Chromium
  found, and the scrapy-playwright settings the add-on sets from them (:func:`apply`);
- ``pages.py``: the per-worker page limit, and each request's pages closed once the
  request has left the engine (:class:`BrowserPages`);
- ``handler.py``: the download handler, scrapy-playwright's with the two above (it needs
  the ``browser`` extra; importing this package does not).
"""

from crawler.browser.config import BrowserConfig, apply
from crawler.browser.pages import BrowserPages

__all__ = ["BrowserConfig", "BrowserPages", "apply"]
