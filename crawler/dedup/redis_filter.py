"""The Redis side of the scalable Bloom filter of :mod:`crawler.dedup.bloom`: Lua scripts.

The scripts are the files ``lua/*.lua`` beside this module (package data), put together
here: ``slices.lua`` (slices and their pieces) starts every script, ``common.lua``
(digests, positions and bit operations) follows it in ``check`` and ``add``. The
constants shared with Python (``MAX_NEW_BITS``, ``SIZE``) come from
:mod:`crawler.dedup.bloom` as one ``local`` line ahead of the file that uses them.

Every script gets ``KEYS[1] = "<key>:meta"`` and ``ARGV[1] = key``. The meta hash holds the
filter's parameters, ``piece_bits`` and, per slice ``i``, ``s<i>:capacity``, ``s<i>:bits``,
``s<i>:hashes`` and ``s<i>:count``. Slice ``i`` is stored in the strings ``<key>:s<i>``
(bits ``0 .. piece_bits - 1``), ``<key>:s<i>:1`` (the next ``piece_bits``), and so on. A
filter created before slices had pieces has no ``piece_bits``: each of its slices is the
one string ``<key>:s<i>``, and its positions are those it always had.

Nothing is allocated ahead: a piece is created, whole and zeroed in one allocation, by the
first ``add`` whose fingerprint lands in it. The pieces one call creates have at most
``MAX_NEW_BITS`` bits together (one default piece; always at least one piece); the
fingerprints of further new pieces are returned to the caller, which sends them again.
Redis checks ``maxmemory`` before a script runs, not inside it, so that bounds what one
call can allocate past the limit to one piece (8 MiB) instead of a whole slice. A piece
that does not exist reads as zeros (never seen).

``check`` and ``add`` fail with ``NOFILTER`` when the meta hash is gone (see
:class:`crawler.dedup.dupefilter.BloomMissing`). ``create`` on an existing filter with the same
parameters adds the slice specs it lacks (a filter planned when slices were capped). When
the last slice the plan allows is over its capacity, ``check`` answers "never seen" for
every fingerprint: the filter stops filtering rather than filter new URLs.

``start``, ``split`` and ``insert`` step through the positions exactly as
:func:`crawler.dedup.bloom.locate` and :func:`crawler.dedup.bloom.positions` do.
A fingerprint's bits
all lie in one piece, so a batch becomes one ``BITFIELD`` (or ``BITFIELD_RO``) per piece
and at most ``MAX_OPS`` operations, with the fingerprints of a piece in batch order: a
fingerprint repeated in a batch is new exactly once. Offsets go to Redis as strings made
with ``%d`` (Redis formats a Lua number argument with ``%.17g``, which is slower).
"""

from __future__ import annotations

from importlib.resources import files

from crawler.dedup.bloom import DIGEST_SIZE, PIECE_BITS


def _script(name: str) -> str:
    """The Lua file *name* of ``lua/``, after a blank line (the scripts' layout)."""
    return "\n" + files("crawler.dedup").joinpath("lua", name).read_text(encoding="utf-8")


# Slices and their pieces (every script).
LUA_SLICES = (f"local MAX_NEW_BITS = {PIECE_BITS}  -- bits of new pieces in one call\n"
              + _script("slices.lua"))

# Digests, positions and bit operations (check and add).
LUA_COMMON = LUA_SLICES + f"local SIZE = {DIGEST_SIZE}\n" + _script("common.lua")

# ARGV: key, capacity, error_rate, growth, piece_bits, slice count, then per slice
# capacity, bits, hashes.
LUA_CREATE = LUA_SLICES + _script("create.lua")

LUA_CHECK = LUA_COMMON + _script("check.lua")

LUA_ADD = LUA_COMMON + _script("add.lua")

# KEYS[1]: the recrawl hash; ARGV: after, create, key (see crawler.dedup.recrawl).
LUA_TICK = _script("tick.lua")

# KEYS[1]: the due hash of per-request intervals (crawler.dedup.due); ARGV: see the files.
LUA_DUE_CHECK = _script("due_check.lua")
LUA_DUE_RECORD = _script("due_record.lua")
