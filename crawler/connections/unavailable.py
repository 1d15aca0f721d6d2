"""The error of a service that cannot be reached at start-up, and the scrubbing of its text."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from crawler.config.readers import mask_url


class ServiceUnavailable(RuntimeError):
    """A service could not be reached at start-up (one line, the address masked)."""

    def __init__(self, setting: str, address: str, error: BaseException | str,
                 hint: str | None = None) -> None:
        super().__init__(
            f"Cannot reach the service of {setting} at {mask_url(address)}: "
            f"{scrub(str(error), address)}"
        )
        self.setting = setting
        #: what to do about it, for the one start-up line (default: start the service)
        self.hint = hint or f"start it, or point {setting} at a running one"


class ServiceRefused(ServiceUnavailable):
    """A service answered but refused what the crawl needs (a missing ACL): one line."""

    def __init__(self, setting: str, address: str, error: BaseException | str,
                 hint: str) -> None:
        RuntimeError.__init__(
            self, f"The service of {setting} at {mask_url(address)} refused the crawl: "
                  f"{scrub(str(error), address)}")
        self.setting = setting
        self.hint = hint


def scrub(text: str, address: str) -> str:
    """*text* on one line, without the password of *address* should a library quote it."""
    try:
        password = urlsplit(address).password
    except ValueError:
        password = None
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, "***")
    return " ".join(text.split())
