"""``scrapy seed`` puts a new host into the crawl's scope before it sends the host's seeds:
a worker that claims a seed at once must not find its host outside the scope (and refuse a
seed that the default ``SEED_SCOPE=add`` was to crawl)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from crawler.commands import seed as command
from crawler.frontier.seedfiles import Seed
from crawler.frontier.seedpublish import SeedScope


class _Redis:
    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def sadd(self, key: str, *members: str) -> None:
        self.events.append(("scope", sorted(members)))

    def pipeline(self, transaction: bool = False) -> Any:
        return _Pipe(self.events)

    def close(self) -> None:
        pass


class _Pipe(_Redis):
    def __enter__(self) -> _Pipe:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def hincrby(self, key: str, name: str, n: int) -> None:
        self.events.append(("ledger", name, n))

    def execute(self) -> None:
        pass


class _Publisher:
    def __init__(self, events: list[Any]) -> None:
        self.events, self.counts = events, Counter[str]()

    def send(self, seed: Seed) -> None:
        self.events.append(("sent", seed.host))
        self.counts["published"] += 1


def test_every_seed_is_sent_after_its_host_joined_the_scope() -> None:
    events: list[Any] = []
    scope = SeedScope(_Redis(events), "c", "add", {"a.test"})  # type: ignore[arg-type]
    publisher = _Publisher(events)
    held = []
    for host in ("a.test", "b.test", "c.test", "b.test"):
        assert scope.admits(f"http://{host}/", host)
        held.append(Seed(f"http://{host}/".encode(), f"http://{host}/", host))
    command._release(held, scope, publisher)  # type: ignore[arg-type]
    assert events[0] == ("scope", ["b.test", "c.test"])
    assert events[1:] == [("sent", h) for h in
                                       ("a.test", "b.test", "c.test", "b.test")]
    scope.close(publisher.counts)  # the hosts went in once, before: not again
    assert ("scope", ["b.test", "c.test"]) not in events[5:]
    assert events[5:] == [("ledger", "submitted/published", 4)]
    assert scope.added == 2 and held == []
