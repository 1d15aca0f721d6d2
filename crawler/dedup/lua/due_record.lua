-- KEYS[1]: the due hash; ARGV: fingerprints (hex) whose requests the broker acknowledged.
-- Records Redis's time now as when each was last queued. Returns that time.
local t = redis.call('TIME')
local now = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1e6)
local fields = {}
for i, fp in ipairs(ARGV) do
  fields[2 * i - 1] = fp
  fields[2 * i] = now
end
redis.call('HSET', KEYS[1], unpack(fields))
return now
