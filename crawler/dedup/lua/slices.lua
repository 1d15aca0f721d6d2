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
