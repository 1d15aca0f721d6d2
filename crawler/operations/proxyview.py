"""Proxy failures by the party at fault, per proxy and per host, for ``scrapy cluster status``
and the dashboard. Pure: no I/O.

Two shared records of a crawl hold them, cumulative over every worker since the crawl began:
each proxy's :class:`~crawler.politeness.proxypool.Health` in ``{<CRAWL_ID>}:proxy:health``
(``proxy_faults``, ``origin_faults``) and the hash ``{<CRAWL_ID>}:proxy:hosts``, whose fields
are ``<cause>:<host>`` (cause ``proxy`` or ``origin``) and values failure counts.
:func:`proxy_faults` and :func:`host_faults` parse them, :func:`failures_status` makes the
``proxy_failures`` part of the status JSON and :func:`failure_lines` its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crawler.connections.records import UNREADABLE
from crawler.operations.texttable import aligned
from crawler.politeness.proxypool import Health

CAUSES = ("proxy", "origin")
TOP_HOSTS = 10  # hosts in the status, those with the most failures first
TEXT_PROXIES = 20  # proxies in the text form (the JSON has them all)
_INDENT = " " * 10


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _total(entry: Mapping[str, Any]) -> int:
    return int(entry["proxy_faults"]) + int(entry["origin_faults"])


def proxy_faults(health: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """Every readable health record as ``{id, state, proxy_faults, origin_faults}``, the
    proxies with the most failures first (unreadable ones: ``proxies.unreadable``)."""
    rows = []
    for proxy_id, value in health.items():
        try:
            record = Health.from_json(value)
        except UNREADABLE:
            continue
        rows.append({"id": _text(proxy_id), "state": record.state.value,
                     "proxy_faults": record.proxy_faults, "origin_faults": record.origin_faults})
    return sorted(rows, key=lambda r: (-_total(r), r["id"]))


def host_faults(raw: Mapping[Any, Any]) -> dict[str, dict[str, int]]:
    """The hosts hash as ``{host: {"proxy_faults": n, "origin_faults": n}}``; fields that are
    not ``<cause>:<host>`` with an integer value are left out."""
    hosts: dict[str, dict[str, int]] = {}
    for name, value in raw.items():
        cause, _, host = _text(name).partition(":")
        try:
            count = int(value)
        except (ValueError, TypeError):
            continue
        if cause in CAUSES and host:
            entry = hosts.setdefault(host, {"proxy_faults": 0, "origin_faults": 0})
            entry[f"{cause}_faults"] += count
    return hosts


def failures_status(proxies: list[dict[str, Any]] | None,
                    hosts: Mapping[str, Mapping[str, int]] | None,
                    top: int = TOP_HOSTS) -> dict[str, Any] | None:
    """``{"totals", "by_proxy", "by_host", "hosts"}``; None if neither record exists.

    ``totals`` sums every proxy's health, ``by_host`` is the *top* hosts by failures (both
    causes) and ``hosts`` how many hosts have any.
    """
    if not proxies and not hosts:
        return None
    by_proxy = list(proxies or [])
    ranked = sorted((hosts or {}).items(), key=lambda h: (-_total(h[1]), h[0]))
    return {
        "totals": {f"{c}_faults": sum(int(p[f"{c}_faults"]) for p in by_proxy) for c in CAUSES},
        "by_proxy": by_proxy,
        "by_host": [{"host": host, **{k: int(counts[k]) for k in ("proxy_faults", "origin_faults")}}
                    for host, counts in ranked[:top]],
        "hosts": len(ranked),
    }


def failure_lines(failures: Mapping[str, Any] | None) -> list[str]:
    """The text form: a totals line, the proxies table and the top hosts table."""
    if failures is None:
        return []
    totals = failures["totals"]
    return [f"blame     {totals['proxy_faults']} failures blamed on proxies, "
            f"{totals['origin_faults']} on origin sites (every worker, since the crawl began)",
            *_proxy_table(failures["by_proxy"]),
            *_host_table(failures["by_host"], failures["hosts"])]


def _proxy_table(proxies: list[Mapping[str, Any]]) -> list[str]:
    if not proxies:
        return []
    rows = [["PROXY", "STATE", "PROXY FAULTS", "ORIGIN FAULTS"]] + [
        [p["id"], p["state"], str(p["proxy_faults"]), str(p["origin_faults"])]
        for p in proxies[:TEXT_PROXIES]]
    lines = [_INDENT + line for line in aligned(rows, left=(0, 1))]
    if len(proxies) > TEXT_PROXIES:
        lines.append(f"{_INDENT}... {len(proxies) - TEXT_PROXIES} more proxies "
                     "(--json lists them all)")
    return lines


def _host_table(hosts: list[Mapping[str, Any]], count: int) -> list[str]:
    if not hosts:
        return [f"{_INDENT}no host has a failure through the pool yet"]
    rows = [[f"HOST (top {len(hosts)} of {count})", "PROXY FAULTS", "ORIGIN FAULTS"]] + [
        [h["host"], str(h["proxy_faults"]), str(h["origin_faults"])] for h in hosts]
    return [_INDENT + line for line in aligned(rows)]
