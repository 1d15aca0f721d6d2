"""The blame rules: which failures lower a proxy's score, which are the origin's.

One test per rule of ``docs/proxies.md`` ("Whose fault"), with the default policy and with
policies written for scrapy-rotating-proxies (its ``BanDetectionPolicy`` calls every status
but 200/301/302 a ban).
"""

from __future__ import annotations

import pytest
from rotating_proxies.policy import BanDetectionPolicy
from scrapy import Request
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    IgnoreRequest,
)
from scrapy.http import Response
from twisted.internet import error as tx
from twisted.web._newclient import ResponseNeverReceived

from crawler.politeness import blame
from crawler.politeness.banpolicy import BanPolicy, SpiderPolicy
from crawler.politeness.blame import Blame, Cause, HostBook
from crawler.politeness.proxypool import Outcome

URL = "http://site.example:8080/page"
GOOD, BAD = "10.0.0.1:3128", "10.0.0.9:3128"


def answer(status: int, body: bytes = b"<html>ok</html>", url: str = URL,
           headers: dict[str, str] | None = None, method: str = "GET") -> tuple[Request,
                                                                                 Response]:
    request = Request(url, method=method)
    return request, Response(url, status=status, body=body, headers=headers, request=request)


def judge(b: Blame, status: int, proxy: str = GOOD, **kw: object) -> blame.Verdict:
    request, response = answer(status, **kw)  # type: ignore[arg-type]
    return b.response(request, response, proxy, 0.0)


def fail(b: Blame, exception: Exception, proxy: str = GOOD) -> blame.Verdict:
    return b.exception(Request(URL), exception, proxy, 0.0)


def warm(b: Blame, proxy: str = GOOD, n: int = 12, status: int = 200) -> None:
    """*n* answers of *status* for the host through *proxy*."""
    for _ in range(n):
        judge(b, status, proxy)


# -- certain: the proxy's -----------------------------------------------------------
@pytest.mark.parametrize("exception", [
    DownloadConnectionRefusedError("refused"), tx.ConnectionRefusedError(),
    tx.DNSLookupError(), CannotResolveHostError("proxy.invalid"), tx.NoRouteError(),
])
def test_an_unreachable_proxy_is_banned(exception: Exception) -> None:
    verdict = fail(Blame(BanPolicy()), exception)
    assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.PROXY, Outcome.BAN, True)


def test_a_connect_timeout_is_the_proxys_failure() -> None:
    verdict = fail(Blame(BanPolicy()), tx.TCPTimedOutError())
    assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.PROXY, Outcome.FAILURE,
                                                                 True)


@pytest.mark.parametrize(("text", "outcome"), [
    ("[{'status': 407, 'reason': 'Proxy Authentication Required'}]", Outcome.BAN),
    ("[{'status': 403, 'reason': 'Forbidden'}]", Outcome.BAN),
    ("[b'garbage']", Outcome.BAN),
    ("[{'status': 502, 'reason': 'Bad Gateway'}]", Outcome.ORIGIN),  # could not reach it
])
def test_a_refused_connect_is_the_proxys_and_a_502_tunnel_is_judged(text: str,
                                                                   outcome: Outcome) -> None:
    exc = TunnelError(f"Could not open CONNECT tunnel with proxy h:1 {text}")
    assert fail(Blame(BanPolicy()), exc).outcome is outcome


def test_the_proxys_own_answer_is_a_ban() -> None:
    b = Blame(BanPolicy())
    assert judge(b, 407).outcome is Outcome.BAN
    verdict = judge(b, 403, headers={"Proxy-Authenticate": "Basic"})
    assert (verdict.cause, verdict.outcome) == (Cause.PROXY, Outcome.BAN)


# -- the origin's ----------------------------------------------------------------------
@pytest.mark.parametrize("status", [429, 502, 503, 504, 500])
def test_come_back_later_and_5xx_are_the_origins(status: int) -> None:
    b = Blame(BanDetectionPolicy())  # which calls all of them bans
    for _ in range(30):
        verdict = judge(b, status)
        assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.ORIGIN,
                                                                     Outcome.ORIGIN, False)


@pytest.mark.parametrize("exception", [
    ResponseNeverReceived([]), DownloadFailedError("reset"), DownloadTimeoutError("slow"),
    tx.ConnectionLost(),
])
def test_resets_and_timeouts_seen_everywhere_are_the_origins(exception: Exception) -> None:
    b = Blame(BanPolicy())
    for proxy in (GOOD, BAD, "10.0.0.2:3128"):
        warm(b, proxy, n=4)
    for proxy in (GOOD, BAD, "10.0.0.2:3128") * 3:
        verdict = fail(b, exception, proxy)
        assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.ORIGIN,
                                                                     Outcome.ORIGIN, False)


def test_a_host_failing_through_every_proxy_blames_none() -> None:
    b = Blame(BanDetectionPolicy())
    proxies = [f"10.0.0.{i}:3128" for i in range(4)]
    for _ in range(40):
        for proxy in proxies:
            assert judge(b, 503, proxy).cause is Cause.ORIGIN
            assert judge(b, 403, proxy).outcome in (None, Outcome.ORIGIN)  # never scored


def test_other_statuses_and_successes_are_the_proxys_success() -> None:
    b = Blame(BanPolicy())
    for status in (200, 301, 404, 410):
        assert judge(b, status) == blame.SUCCESS


def test_exceptions_that_say_nothing_are_not_judged() -> None:
    b = Blame(BanPolicy())
    assert fail(b, IgnoreRequest("robots")) == blame.NOT_JUDGED
    assert fail(b, ValueError("a bug")) == blame.NOT_JUDGED


# -- by comparison: the proxy's ----------------------------------------------------------
def test_a_ban_like_answer_unexplained_yet_is_reissued_unscored() -> None:
    verdict = judge(Blame(BanPolicy()), 403)
    assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.NONE, None, True)


def test_a_proxy_failing_where_the_others_work_is_banned() -> None:
    b = Blame(BanPolicy())
    warm(b, GOOD)
    verdicts = [judge(b, 403, BAD) for _ in range(blame.BROKEN_OWN)]
    assert [v.outcome for v in verdicts[:blame.MIN_OWN - 1]] == [None] * (blame.MIN_OWN - 1)
    assert verdicts[-1].outcome is Outcome.BAN and verdicts[-1].cause is Cause.PROXY


def test_a_proxy_clearly_worse_than_the_others_loses_score() -> None:
    b = Blame(BanDetectionPolicy())
    warm(b, GOOD, n=20)
    for status in (200, 503, 503, 503, 503):  # 1 in 5 through BAD, all through GOOD
        verdict = judge(b, status, BAD)
    assert (verdict.cause, verdict.outcome, verdict.reissue) == (Cause.PROXY, Outcome.FAILURE,
                                                                 True)


def test_resets_through_one_proxy_only_are_its_failures() -> None:
    b = Blame(BanPolicy())
    warm(b, GOOD, n=20)
    verdicts = [fail(b, ResponseNeverReceived([]), BAD) for _ in range(blame.MIN_OWN)]
    assert verdicts[0].cause is Cause.ORIGIN  # one reset proves nothing
    assert verdicts[-1].cause is Cause.PROXY and verdicts[-1].outcome is Outcome.FAILURE


def test_the_book_forgets_old_answers_and_counts_hosts_apart() -> None:
    book = HostBook()
    for _ in range(20):
        book.record("a", GOOD, True, 0.0)
    for _ in range(10):
        book.record("a", BAD, False, 0.0)
    assert book.broken("a", BAD, 1.0) and not book.broken("b", BAD, 1.0)
    assert not book.broken("a", BAD, blame.MAX_AGE + 1)


# -- scrapy-rotating-proxies policies ------------------------------------------------------
class CaptchaPolicy(BanDetectionPolicy):  # written for scrapy-rotating-proxies
    def response_is_ban(self, request: object, response: object) -> bool:
        ban = super().response_is_ban(request, response)
        return ban or b"captcha" in response.body  # type: ignore[attr-defined]

    def exception_is_ban(self, request: object, exception: BaseException) -> None:
        return None


def test_a_rotating_proxies_subclass_is_a_ban_policy() -> None:
    b = Blame(CaptchaPolicy())
    assert judge(b, 200) == blame.SUCCESS
    assert judge(b, 200, body=b"solve this captcha").reissue  # a suspect: another proxy
    warm(b, "10.0.0.2:3128")
    for _ in range(blame.BROKEN_OWN):
        verdict = judge(b, 200, BAD, body=b"solve this captcha")
    assert verdict.outcome is Outcome.BAN  # only through BAD: BAD's fault
    # its exception_is_ban says "unknown": network errors are still judged by kind
    assert fail(b, tx.ConnectionRefusedError()).outcome is Outcome.BAN
    assert fail(b, IgnoreRequest()) == blame.NOT_JUDGED


def test_spider_methods_come_first_like_in_rotating_proxies() -> None:
    class Spider:
        def response_is_ban(self, request: object, response: object) -> bool:
            return False

        def exception_is_ban(self, request: object, exception: BaseException) -> bool:
            return False

    b = Blame(SpiderPolicy(BanDetectionPolicy(), Spider()))
    assert judge(b, 403) == blame.SUCCESS
    assert fail(b, tx.ConnectionRefusedError()) == blame.NOT_JUDGED
    assert SpiderPolicy(BanDetectionPolicy(), object()).proxy_answer(*answer(407))


def test_a_403_on_a_flaky_host_is_reissued_not_given_to_the_origin() -> None:
    """Seen in CI: on a host answering 429s through every proxy, a 403 from one proxy was
    taken for the origin's and the page was dropped. A 403 is a page's answer: it goes to
    another proxy until the same answer through the proxy budget makes it the origin's."""
    b = Blame(BanPolicy())  # 429 is a ban-like answer of the default policy
    for proxy in (GOOD, "10.0.0.2:3128"):
        for _ in range(10):
            judge(b, 429, proxy)
    verdict = judge(b, 403, BAD)
    assert verdict.reissue and verdict.cause is not Cause.ORIGIN
