"""The proxy credentials and settings of the ProxyPoolMiddleware tests (in process and
through a real proxy)."""

from __future__ import annotations

import base64

USER, SECRET = "crawl", "pr0xy-s3cret"
SECRETS = (SECRET, base64.b64encode(f"{USER}:{SECRET}".encode()).decode())
OURS = "crawler.middlewares.proxies.ProxyPoolMiddleware"
PROXY_ON = {"PROXY_ENABLED": True, "DOWNLOADER_MIDDLEWARES": {OURS: 610}}


def assert_no_secret(*texts: str) -> None:
    """None of *texts* holds the proxy's password, plain or in a Basic auth header."""
    for text in texts:
        for secret in SECRETS:
            assert secret not in text
