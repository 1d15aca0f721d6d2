"""Test servers: a misbehaving origin and local forward proxies (not shipped in the wheel)."""
