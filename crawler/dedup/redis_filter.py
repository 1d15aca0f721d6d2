"""The Redis side of the scalable Bloom filter of :mod:`crawler.dedup.bloom`: Lua scripts.

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

from crawler.dedup.bloom import DIGEST_SIZE, PIECE_BITS

# Slices and their pieces (every script).
LUA_SLICES = f"local MAX_NEW_BITS = {PIECE_BITS}  -- bits of new pieces in one call\n" + """
local MAX_OPS = 200  -- operations in one BITFIELD call (as fast as 1750 a bit, smaller replies)
local meta, base, fmt = KEYS[1], ARGV[1], string.format
local function slice(i)
  local p = 's' .. i .. ':'
  local v = redis.call('HMGET', meta, p .. 'bits', p .. 'hashes', p .. 'capacity', p .. 'count',
                       'piece_bits')
  if not v[1] then return nil end
  local bits = tonumber(v[1])
  local per = math.min(tonumber(v[5]) or bits, bits)
  return {index = i, key = base .. ':s' .. i, bits = bits, hashes = tonumber(v[2]),
          capacity = tonumber(v[3]), count = tonumber(v[4]) or 0,
          per = per, pieces = math.ceil(bits / per)}
end
local function piece_key(s, j)
  if j == 0 then return s.key end
  return s.key .. ':' .. j
end
"""

# Digests, positions and bit operations (check and add).
LUA_COMMON = LUA_SLICES + f"local SIZE = {DIGEST_SIZE}\n" + """
local digests = ARGV[2] or ''
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
local function load()
  local n = tonumber(redis.call('HGET', meta, 'slices'))
  if not n then return nil end
  local slices = {}
  for i = 0, n - 1 do slices[i + 1] = slice(i) end
  return slices
end
-- Fingerprint i's place in slice s: its piece (1 = the first), the piece's size in bits,
-- and its first bit and step inside the piece (see crawler.dedup.bloom.locate).
local function start(s, i)
  local bits, per = s.bits, s.per
  local first = h1[i] % bits
  local j = math.floor(first / per)
  local size = math.min(per, bits - j * per)
  local step = h2[i] % size
  if step == 0 then step = 1 end
  return j + 1, size, first - j * per, step
end
-- Split idx into the fingerprints slice s has not seen and those it has (probably) seen.
-- Read-only; probes hash j of every candidate left at once (one BITFIELD_RO per piece
-- and MAX_OPS), so a fingerprint leaves after its first 0 bit (about 2 probes in a full
-- slice).
local function split(s, idx)
  local piece, size, pos, step, absent, cand = {}, {}, {}, {}, {}, idx
  for _, i in ipairs(idx) do piece[i], size[i], pos[i], step[i] = start(s, i) end
  for _ = 1, s.hashes do
    if #cand == 0 then break end
    local ops, who, n, present, order = {}, {}, {}, {}, {}
    for t = 1, #cand do
      local i = cand[t]
      local j = piece[i]
      local m, o = (n[j] or 0) + 1, ops[j]
      if not o then o = {}; ops[j], who[j] = o, {}; order[#order + 1] = j end
      o[3 * m - 2], o[3 * m - 1], o[3 * m] = 'GET', 'u1', fmt('%d', pos[i])
      who[j][m], n[j] = i, m
    end
    for _, j in ipairs(order) do
      for first = 1, n[j], MAX_OPS do
        local last = math.min(n[j], first + MAX_OPS - 1)
        local got = redis.call('BITFIELD_RO', piece_key(s, j - 1),
                               unpack(ops[j], 3 * first - 2, 3 * last))
        for u = first, last do
          local i = who[j][u]
          if got[u - first + 1] == 0 then absent[#absent + 1] = i else
            present[#present + 1] = i
            local q = pos[i] + step[i]
            if q >= size[i] then q = q - size[i] end
            pos[i] = q
          end
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
-- Set the bits of the fingerprints `list` (all in piece j of slice s), in order; appends
-- those that changed a bit (the new ones) to `new`.
local function insert_piece(s, j, list, new)
  local k, key = s.hashes, piece_key(s, j - 1)
  local group = math.max(1, math.floor(MAX_OPS / k))
  for first = 1, #list, group do
    local last, ops, n = math.min(#list, first + group - 1), {}, 0
    for t = first, last do
      local _, size, pos, step = start(s, list[t])
      for _ = 1, k do
        ops[n + 1], ops[n + 2], ops[n + 3], ops[n + 4] = 'SET', 'u1', fmt('%d', pos), '1'
        n = n + 4
        pos = pos + step
        if pos >= size then pos = pos - size end
      end
    end
    local old = redis.call('BITFIELD', key, unpack(ops, 1, n))
    for t = first, last do
      for b = (t - first) * k + 1, (t - first + 1) * k do
        if old[b] == 0 then new[#new + 1] = list[t] break end
      end
    end
  end
end
-- Whether piece j (1 = the first) of slice s exists; if not, and the pieces this call
-- created have fewer than MAX_NEW_BITS bits with it (or it is the first), create it at its
-- full size (zeros, one allocation).
local made = 0
local function ensure(s, j)
  local key = piece_key(s, j - 1)
  if redis.call('EXISTS', key) == 1 then return true end
  local size = math.min(s.per, s.bits - (j - 1) * s.per)
  if made > 0 and made + size > MAX_NEW_BITS then return false end
  made = made + size
  redis.call('SETBIT', key, size - 1, 0)
  return true
end
-- Set the bits of idx in slice s, in order; returns the fingerprints that changed a bit
-- (new), and appends to `later` those whose piece does not exist and may not be created
-- in this call.
local function insert(s, idx, later)
  local lists, new, order = {}, {}, {}
  for _, i in ipairs(idx) do
    local j = start(s, i)
    local list = lists[j]
    if not list then list = {}; lists[j] = list; order[#order + 1] = j end
    list[#list + 1] = i
  end
  for _, j in ipairs(order) do
    local list = lists[j]
    if ensure(s, j) then insert_piece(s, j, list, new)
    else for _, i in ipairs(list) do later[#later + 1] = i end end
  end
  return new
end
"""

# ARGV: key, capacity, error_rate, growth, piece_bits, slice count, then per slice
# capacity, bits, hashes.
LUA_CREATE = LUA_SLICES + """
local function plan(set)
  for i = 0, tonumber(ARGV[6]) - 1 do
    local at, p = 7 + i * 3, 's' .. i .. ':'
    set(p .. 'capacity', ARGV[at]); set(p .. 'bits', ARGV[at + 1])
    set(p .. 'hashes', ARGV[at + 2])
  end
end
if redis.call('EXISTS', meta) == 1 then
  local stored = redis.call('HMGET', meta, 'capacity', 'error_rate', 'growth', 'piece_bits')
  if stored[4] and stored[1] == ARGV[2] and stored[2] == ARGV[3] and stored[3] == ARGV[4] then
    -- a filter planned with fewer slices: the slices it lacks (those it has stay)
    plan(function(f, v) redis.call('HSETNX', meta, f, v) end)
  end
  return {stored[1], stored[2], stored[3]}
end
redis.call('HSET', meta, 'capacity', ARGV[2], 'error_rate', ARGV[3], 'growth', ARGV[4],
           'piece_bits', ARGV[5], 'slices', 1, 'version', 3, 's0:count', 0)
plan(function(f, v) redis.call('HSET', meta, f, v) end)
return {ARGV[2], ARGV[3], ARGV[4]}
"""

LUA_CHECK = LUA_COMMON + """
local slices, flags, idx = load(), {}, {}
if not slices then return redis.error_reply('NOFILTER ' .. meta .. ' does not exist') end
local last = slices[#slices]
if last.count > last.capacity and not slice(last.index + 1) then
  return {string.rep('0', count), 1}  -- full for good: filter nothing rather than too much
end
for i = 1, count do flags[i] = '1'; idx[i] = i end
for _, i in ipairs(unseen(slices, #slices, idx)) do flags[i] = '0' end
return {table.concat(flags), 0}
"""

LUA_ADD = LUA_COMMON + """
local slices = load()
if not slices then return redis.error_reply('NOFILTER ' .. meta .. ' does not exist') end
local flags, grown, full, done, added, later = {}, {}, 0, 0, 0, {}
for i = 1, count do flags[i] = '0' end
local function grow()
  local cur = slices[#slices]
  local nxt = slice(cur.index + 1)
  if not nxt then full = 1 return end
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
  local new = insert(cur, unseen(slices, #slices - 1, idx), later)
  for _, i in ipairs(new) do flags[i] = '1' end
  cur.count = cur.count + #new
  added = added + #new
end
if filled() and full == 0 then grow() end
local last = slices[#slices]
if added > 0 then redis.call('HSET', meta, 's' .. last.index .. ':count', last.count) end
return {table.concat(flags), grown, full, later}
"""
