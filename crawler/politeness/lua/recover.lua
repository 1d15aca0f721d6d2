local now = clock()
local rate, burst = limit()
local cur = lowered(rate)
if not cur then
  if redis.call('HEXISTS', KEYS[1], 'rate') == 1 then redis.call('HDEL', KEYS[1], 'rate', 'ok') end
  return {0, num(rate)}
end
if redis.call('HINCRBY', KEYS[1], 'ok', 1) < tonumber(ARGV[6]) then
  keep_current(now, cur, burst)
  return {0, num(cur)}
end
local new = cur + tonumber(ARGV[7]) * rate
if new >= rate then
  redis.call('HDEL', KEYS[1], 'rate', 'ok')
  new = rate
else
  redis.call('HSET', KEYS[1], 'rate', num(new), 'ok', 0)
end
if redis.call('EXISTS', KEYS[1]) == 1 then keep_current(now, new, burst) end
return {1, num(new)}
