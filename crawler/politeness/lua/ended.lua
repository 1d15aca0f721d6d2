-- a request of a host with a gap got its answer (or failed): the bucket starts empty from now,
-- so the host's next request goes a whole gap after this one ended, whatever either's lag.
-- ARGV[6]: the slot of the request's token if it holds the host (reserve.lua), else '':
-- its hold ends; another request's hold stays. Returns the seconds to the next slot.
local now = clock()
local rate, burst = limit()
local b = redis.call('HMGET', KEYS[1], 'at', 'rate', 'holder')
local eff = lowered(rate, b[2]) or rate
local held, mine = tonumber(b[3]), tonumber(ARGV[6])
mine = held ~= nil and mine ~= nil and math.abs(held - mine) < 1e-6
local at = now
if b[1] and not mine then at = math.max(now, tonumber(b[1])) end
redis.call('HSET', KEYS[1], 'tokens', '0', 'at', num(at))
if mine then redis.call('HDEL', KEYS[1], 'holder') end
keep(now, at, 0, eff, burst)
return num(at - now + 1 / eff)
