"""Sizing and hashing of a scalable Bloom filter (Almeida et al., 2007): pure logic, no I/O.

A filter is a list of slices. Slice ``i`` holds ``capacity * growth**i`` items at a
false-positive rate of ``error_rate * (1 - r) * r**i`` with the tightening ratio
``r = 0.5``, so the compound rate of all slices stays below ``error_rate``.

Bit positions use double hashing, ``(h1 + j*h2) mod bits`` for ``j < hashes``, with
``h1`` and ``h2`` taken from a digest of the request fingerprint. Every value stays
below 2**53, so the Redis Lua script (whose numbers are doubles) computes exactly the
positions :func:`positions` computes here.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from crawler.config import SettingError

TIGHTENING_RATIO = 0.5
MAX_SLICE_BITS = 2**32  # a Redis string holds at most 512 MiB
MAX_SLICES = 32  # a filter never plans more slices than this
DIGEST_SIZE = 12  # bytes of a fingerprint digest: two 48-bit halves
_HALF = DIGEST_SIZE // 2


@dataclass(frozen=True)
class SliceSpec:
    """One slice of a scalable Bloom filter."""

    capacity: int  # items the slice holds at its error rate
    error_rate: float  # false-positive rate of the slice when it holds *capacity* items
    bits: int
    hashes: int

    @property
    def nbytes(self) -> int:
        """Bytes of the slice's bit array."""
        return (self.bits + 7) // 8


def slice_spec(index: int, *, capacity: int, error_rate: float, growth: int) -> SliceSpec:
    """The size of slice *index* (0 = first) of a filter with these parameters.

    ``bits = ceil(-n ln p / (ln 2)**2)`` and ``hashes = ceil(log2(1 / p))``, where
    ``n = capacity * growth**index`` and ``p = error_rate * (1 - r) * r**index``.
    """
    if index < 0:
        raise ValueError(f"slice index must be >= 0, got {index}")
    items = capacity * growth**index
    rate = error_rate * (1 - TIGHTENING_RATIO) * TIGHTENING_RATIO**index
    ln2 = math.log(2)
    bits = math.ceil(-items * math.log(rate) / (ln2 * ln2))
    hashes = max(1, math.ceil(math.log2(1 / rate)))
    return SliceSpec(capacity=items, error_rate=rate, bits=bits, hashes=hashes)


def plan(*, capacity: int, error_rate: float, growth: int) -> list[SliceSpec]:
    """Every slice the filter may ever add: at most :data:`MAX_SLICES`, each fitting
    a Redis string (:data:`MAX_SLICE_BITS`)."""
    specs: list[SliceSpec] = []
    for index in range(MAX_SLICES):
        spec = slice_spec(index, capacity=capacity, error_rate=error_rate, growth=growth)
        if spec.bits > MAX_SLICE_BITS:
            break
        specs.append(spec)
    return specs


def compound_error_rate(specs: list[SliceSpec]) -> float:
    """Upper bound of the false-positive rate of a filter whose slices are all full."""
    return 1 - math.prod(1 - spec.error_rate for spec in specs)


def validate(
    *,
    capacity: int,
    error_rate: float,
    growth: int = 2,
    prefix: str = "BLOOM",
    max_bits: int | None = MAX_SLICE_BITS,
) -> None:
    """Raise :class:`SettingError` naming ``<prefix>_CAPACITY``, ``<prefix>_ERROR_RATE``
    or ``<prefix>_GROWTH`` if a filter cannot be built from these values, or if its
    first slice would need more than *max_bits* bits (``None``: no limit)."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise SettingError(f"{prefix}_CAPACITY", f"expected an integer >= 1, got {capacity!r}")
    if not isinstance(error_rate, (int, float)) or not 0 < error_rate < 1:
        raise SettingError(
            f"{prefix}_ERROR_RATE", f"expected a number > 0 and < 1, got {error_rate!r}"
        )
    if isinstance(growth, bool) or not isinstance(growth, int) or growth < 1:
        raise SettingError(f"{prefix}_GROWTH", f"expected an integer >= 1, got {growth!r}")
    if max_bits is None:
        return
    first = slice_spec(0, capacity=capacity, error_rate=error_rate, growth=growth)
    if first.bits > max_bits:
        raise SettingError(
            f"{prefix}_CAPACITY",
            f"{capacity} items at {prefix}_ERROR_RATE {error_rate} need {first.bits} bits "
            f"in the first slice, more than a Redis string holds ({max_bits}); "
            f"lower {prefix}_CAPACITY and let the filter grow instead",
        )


def digest(fingerprint: bytes) -> bytes:
    """The :data:`DIGEST_SIZE`-byte digest of *fingerprint* that the Redis script reads.

    Re-hashing makes any fingerprinter's output uniform, not only Scrapy's SHA1."""
    return hashlib.blake2b(fingerprint, digest_size=DIGEST_SIZE).digest()


def hash_pair(fingerprint: bytes) -> tuple[int, int]:
    """The double-hashing pair ``(h1, h2)`` of *fingerprint*: two integers below 2**48,
    ``h2`` odd (so never zero)."""
    value = digest(fingerprint)
    return (
        int.from_bytes(value[:_HALF], "big"),
        int.from_bytes(value[_HALF:], "big") | 1,
    )


def positions(h1: int, h2: int, *, bits: int, hashes: int) -> list[int]:
    """The bit positions ``(h1 + j*h2) mod bits``, ``j < hashes``, computed the way
    the Lua script computes them (no value above ``2 * bits``)."""
    pos = h1 % bits
    step = h2 % bits or 1
    result = []
    for _ in range(hashes):
        result.append(pos)
        pos += step
        if pos >= bits:
            pos -= bits
    return result


# --- The Redis side: Lua scripts (KEYS[1] = "<key>:meta", ARGV[1] = key, ARGV[2] = the
# concatenated digests). ``split`` and ``insert`` step through the positions exactly as
# :func:`positions` does.
LUA_COMMON = f"local MAX_OPS, SIZE = 1750, {DIGEST_SIZE}\n" + """
local meta, base, digests = KEYS[1], ARGV[1], ARGV[2] or ''
local count = #digests / SIZE
local h1, h2 = {}, {}
local function word(at)
  local a, b, c, d, e, f = string.byte(digests, at, at + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
for i = 1, count do
  local at = (i - 1) * SIZE + 1
  h1[i] = word(at)
  h2[i] = word(at + SIZE / 2)
  if h2[i] % 2 == 0 then h2[i] = h2[i] + 1 end
end
local function slice(i)
  local p = 's' .. i .. ':'
  local v = redis.call('HMGET', meta, p .. 'bits', p .. 'hashes', p .. 'capacity', p .. 'count')
  if not v[1] then return nil end
  return {index = i, key = base .. ':s' .. i, bits = tonumber(v[1]), hashes = tonumber(v[2]),
          capacity = tonumber(v[3]), count = tonumber(v[4]) or 0}
end
local function load()
  local n = tonumber(redis.call('HGET', meta, 'slices'))
  if not n then return nil end
  local slices = {}
  for i = 0, n - 1 do slices[i + 1] = slice(i) end
  return slices
end
local function start(bits, i)
  local step = h2[i] % bits
  if step == 0 then step = 1 end
  return h1[i] % bits, step
end
-- Split idx into the fingerprints slice s has not seen and those it has (probably) seen.
-- Read-only; probes hash j of every candidate left in one BITFIELD_RO, so a fingerprint
-- leaves after its first 0 bit (about 2 probes in a full slice).
local function split(s, idx)
  local bits, pos, step, absent, cand = s.bits, {}, {}, {}, idx
  for _, i in ipairs(idx) do pos[i], step[i] = start(bits, i) end
  for _ = 1, s.hashes do
    if #cand == 0 then break end
    local present = {}
    for first = 1, #cand, MAX_OPS do
      local last, ops, n = math.min(#cand, first + MAX_OPS - 1), {}, 0
      for t = first, last do
        ops[n + 1], ops[n + 2], ops[n + 3] = 'GET', 'u1', pos[cand[t]]
        n = n + 3
      end
      local got = redis.call('BITFIELD_RO', s.key, unpack(ops, 1, n))
      for t = first, last do
        local i = cand[t]
        if got[t - first + 1] == 0 then absent[#absent + 1] = i else
          present[#present + 1] = i
          local p = pos[i] + step[i]
          if p >= bits then p = p - bits end
          pos[i] = p
        end
      end
    end
    cand = present
  end
  table.sort(absent)
  return absent, cand
end
-- the fingerprints of idx that no slice from `last` down to 1 has seen
local function unseen(slices, last, idx)
  for s = last, 1, -1 do
    if #idx == 0 then break end
    idx = split(slices[s], idx)
  end
  return idx
end
-- Set the bits of idx in slice s, in order; returns the fingerprints that changed a bit (new)
local function insert(s, idx)
  local k, bits, new = s.hashes, s.bits, {}
  local group = math.max(1, math.floor(MAX_OPS / k))
  for first = 1, #idx, group do
    local last, ops, n = math.min(#idx, first + group - 1), {}, 0
    for t = first, last do
      local pos, step = start(bits, idx[t])
      for _ = 1, k do
        ops[n + 1], ops[n + 2], ops[n + 3], ops[n + 4] = 'SET', 'u1', pos, '1'
        n = n + 4
        pos = pos + step
        if pos >= bits then pos = pos - bits end
      end
    end
    local old = redis.call('BITFIELD', s.key, unpack(ops, 1, n))
    for t = first, last do
      for j = (t - first) * k + 1, (t - first + 1) * k do
        if old[j] == 0 then new[#new + 1] = idx[t] break end
      end
    end
  end
  return new
end
"""

LUA_CREATE = """
local meta, base = KEYS[1], ARGV[1]
if redis.call('EXISTS', meta) == 1 then
  return redis.call('HMGET', meta, 'capacity', 'error_rate', 'growth')
end
redis.call('HSET', meta, 'capacity', ARGV[2], 'error_rate', ARGV[3], 'growth', ARGV[4],
           'slices', 1, 'version', 1, 's0:count', 0)
for i = 0, tonumber(ARGV[5]) - 1 do
  local at, p = 6 + i * 3, 's' .. i .. ':'
  redis.call('HSET', meta, p .. 'capacity', ARGV[at], p .. 'bits', ARGV[at + 1],
             p .. 'hashes', ARGV[at + 2])
end
redis.call('SETBIT', base .. ':s0', tonumber(ARGV[7]) - 1, 0)
return {ARGV[2], ARGV[3], ARGV[4]}
"""

LUA_CHECK = LUA_COMMON + """
local slices, flags, idx = load(), {}, {}
for i = 1, count do flags[i] = '1'; idx[i] = i end
if not slices then slices = {} end
for _, i in ipairs(unseen(slices, #slices, idx)) do flags[i] = '0' end
return table.concat(flags)
"""

LUA_ADD = LUA_COMMON + """
local slices = load()
if not slices then return redis.error_reply('NOFILTER ' .. meta .. ' does not exist') end
local flags, grown, full, done, added = {}, {}, 0, 0, 0
for i = 1, count do flags[i] = '0' end
local function grow()
  local cur = slices[#slices]
  local nxt = slice(cur.index + 1)
  if not nxt then full = 1 return end
  redis.call('SETBIT', nxt.key, nxt.bits - 1, 0)
  redis.call('HSET', meta, 'slices', nxt.index + 1, 's' .. cur.index .. ':count', cur.count,
             's' .. nxt.index .. ':count', 0)
  slices[#slices + 1] = nxt
  local items = 0
  for _, s in ipairs(slices) do items = items + s.count end
  grown[#grown + 1] = {nxt.index, items, nxt.capacity}
end
local function filled() return slices[#slices].count >= slices[#slices].capacity end
while done < count do
  if filled() and full == 0 then grow() end
  local cur = slices[#slices]
  local room = cur.capacity - cur.count
  if room <= 0 then room = count end
  local idx = {}
  for i = done + 1, math.min(count, done + room) do idx[#idx + 1] = i end
  done = done + #idx
  local new = insert(cur, unseen(slices, #slices - 1, idx))
  for _, i in ipairs(new) do flags[i] = '1' end
  cur.count = cur.count + #new
  added = added + #new
end
if filled() and full == 0 then grow() end
local last = slices[#slices]
if added > 0 then redis.call('HSET', meta, 's' .. last.index .. ':count', last.count) end
return {table.concat(flags), grown, full}
"""
