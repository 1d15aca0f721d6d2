"""What reading a record that another process wrote can raise, in one place.

Heartbeats, alerts, proxy health, the finished mark and frontier records are written by
workers, but anything with access to Redis or Kafka can write them too, and an older or
newer version may write another shape. A reader that cannot use one skips it, counts it as
unreadable or starts afresh; it never lets one of these end the worker or the command.
"""

from __future__ import annotations

#: bad JSON or UTF-8 (ValueError), a missing key, a wrong type (``[]["ts"]``, ``[].get``),
#: a number out of range (``float(10**400)``, ``int(1e400)``), nesting past the recursion limit
UNREADABLE: tuple[type[Exception], ...] = (
    ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)
