"""Configuration: typed setting readers, every default, and the keys a crawl owns.

- :mod:`~crawler.config.readers`: ``get_int``/``get_float``/... that name the setting in
  their :class:`SettingError`, and :func:`mask_url` for anything logged.
- :mod:`~crawler.config.defaults`: the default of every setting the crawler reads.
- :mod:`~crawler.config.keys`: :class:`CrawlKeys`, every Redis key of a crawl, and
  :func:`worker_id`, this process's id everywhere it is shown.
"""

from crawler.config.keys import CrawlKeys, worker_id
from crawler.config.readers import SettingError, crawl_id, mask_url

__all__ = ["CrawlKeys", "SettingError", "crawl_id", "mask_url", "worker_id"]
