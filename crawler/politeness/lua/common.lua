local function num(x) return string.format('%.17g', x) end
local function clock()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function positive(x) return x and x == x and x > 0 and x < math.huge end
-- the configured limit: the settings', then the live override; bad = 1 if it is malformed
local function limit()
  local rate, burst, bad = tonumber(ARGV[3]), tonumber(ARGV[4]), 0
  local raw = redis.call('HGET', KEYS[2], ARGV[2])
  if not raw then return rate, burst, bad end
  local ok, o = pcall(cjson.decode, raw)
  if not ok or type(o) ~= 'table' then return rate, burst, 1 end
  if o['rate'] ~= nil then
    local r = tonumber(o['rate'])
    if positive(r) then rate = r else bad = 1 end
  end
  if o['burst'] ~= nil then
    local b = tonumber(o['burst'])
    if positive(b) and b >= 1 then burst = b else bad = 1 end
  end
  return rate, burst, bad
end
-- the lowered rate stored in the hash (*stored*: its "rate" field), if below *rate*
local function lowered(rate, stored)
  if stored == nil then stored = redis.call('HGET', KEYS[1], 'rate') end
  local r = tonumber(stored)
  if r and r < rate then return r end
  return nil
end
-- keep the hash until its bucket is full again, plus ARGV[5] seconds of adaptive memory
local function keep(now, at, tokens, rate, burst)
  local secs = math.max(at - now, 0) + (burst - math.min(tokens, burst)) / rate
  redis.call('PEXPIRE', KEYS[1], math.ceil((secs + tonumber(ARGV[5])) * 1000))
end
local function keep_current(now, rate, burst)
  local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
  keep(now, tonumber(b[2]) or now, tonumber(b[1]) or burst, rate, burst)
end
