local now = clock()
local rate, burst = limit()
local cur = lowered(rate) or rate
local dec = tonumber(redis.call('HGET', KEYS[1], 'dec'))
if dec and tonumber(ARGV[8]) < dec then
  redis.call('HSET', KEYS[1], 'ok', 0)
  keep_current(now, cur, burst)
  return {0, num(cur)}
end
local new = math.max(math.min(tonumber(ARGV[7]), rate), cur * tonumber(ARGV[6]))
redis.call('HSET', KEYS[1], 'rate', num(new), 'ok', 0, 'dec', num(now))
keep_current(now, new, burst)
if new < cur then return {1, num(new)} end
return {0, num(new)}
