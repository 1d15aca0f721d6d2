-- a request of a host with a gap got its answer (or failed): the bucket starts empty from now,
-- so the host's next request goes a whole gap after this one ended, whatever either's lag
local now = clock()
local rate, burst = limit()
local b = redis.call('HMGET', KEYS[1], 'at', 'rate')
local eff = lowered(rate, b[2]) or rate
local at = now
if b[1] then at = math.max(now, tonumber(b[1])) end
redis.call('HSET', KEYS[1], 'tokens', '0', 'at', num(at))
keep(now, at, 0, eff, burst)
return 1
