-- KEYS[1]: the recrawl hash; ARGV: after (seconds), create ('1': start generation 1 if the
-- hash is missing), the Bloom key (generation n is the filter <key>:g<n>).
-- Advances the generation by the whole periods elapsed since it started (Redis time) and
-- deletes the filters older than the previous generation. Returns the generation, its
-- start, Redis's time and the generations deleted.
local reg, after, create, base = KEYS[1], tonumber(ARGV[1]), ARGV[2], ARGV[3]
local fmt = string.format
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local v = redis.call('HMGET', reg, 'generation', 'started')
local gen, started = tonumber(v[1]), tonumber(v[2])
if not gen then
  if create ~= '1' then return redis.error_reply('NOFILTER ' .. reg .. ' does not exist') end
  gen, started = 1, now
  redis.call('HSET', reg, 'generation', gen, 'started', fmt('%.6f', now))
end
-- Delete the filter <key> (its meta hash and every piece of its slices); false if absent.
local function drop(key)
  local meta = key .. ':meta'
  local n = tonumber(redis.call('HGET', meta, 'slices'))
  if not n then return false end
  local per = tonumber(redis.call('HGET', meta, 'piece_bits'))
  for i = 0, n - 1 do
    local bits = tonumber(redis.call('HGET', meta, 's' .. i .. ':bits'))
    local s = key .. ':s' .. i
    redis.call('UNLINK', s)
    for j = 1, math.ceil(bits / math.min(per or bits, bits)) - 1 do
      redis.call('UNLINK', s .. ':' .. j)
    end
  end
  redis.call('UNLINK', meta)
  return true
end
local dropped = {}
local steps = math.floor((now - started) / after)
if steps >= 1 then
  local old = gen
  gen, started = gen + steps, started + steps * after
  redis.call('HSET', reg, 'generation', gen, 'started', fmt('%.6f', started))
  for _, g in ipairs({old - 1, old}) do  -- only these two can exist
    if g >= 1 and g <= gen - 2 and drop(base .. ':g' .. g) then dropped[#dropped + 1] = g end
  end
end
redis.call('HSET', reg, 'after', ARGV[1])
return {gen, fmt('%.6f', started), fmt('%.6f', now), dropped}
