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
