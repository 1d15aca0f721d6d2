local now = clock()
local rate, burst, bad = limit()
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'rate')
local eff = lowered(rate, b[3]) or rate
local tokens, at = burst, now
if b[1] then tokens, at = tonumber(b[1]), tonumber(b[2]) end
local start = math.max(now, at)
tokens = math.min(burst, tokens + (start - at) * eff)
local slot, left = start, tokens - 1
if tokens < 1 then slot, left = start + (1 - tokens) / eff, 0 end
local wait = slot - now
if wait > tonumber(ARGV[6]) then
  return {0, num(wait), num(eff), num(rate), num(now), bad}
end
-- a gap's request holds its host until it ends (ended.lua) or ARGV[7] seconds pass
local hold = tonumber(ARGV[7]) or 0
if hold > 0 then
  redis.call('HSET', KEYS[1], 'tokens', num(left), 'at', num(slot + hold), 'holder', num(slot))
  keep(now, slot + hold, left, eff, burst)
else
  redis.call('HSET', KEYS[1], 'tokens', num(left), 'at', num(slot))
  keep(now, slot, left, eff, burst)
end
return {1, num(wait), num(eff), num(rate), num(now), bad}
