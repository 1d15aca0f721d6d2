-- KEYS[1]: the due hash (fingerprint hex -> Redis time it was last queued, in seconds).
-- ARGV: pairs of fingerprint hex and interval (seconds, > 0).
-- Read only. Returns one flag a fingerprint, as a string: '1' if it was queued less than
-- its interval ago on Redis's clock (not due: filtered), '0' if it is due (or unknown).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local n = #ARGV / 2
local fps = {}
for i = 1, n do fps[i] = ARGV[2 * i - 1] end
local last = redis.call('HMGET', KEYS[1], unpack(fps))
local flags = {}
for i = 1, n do
  local at = last[i] and tonumber(last[i])
  flags[i] = (at and now - at < tonumber(ARGV[2 * i])) and '1' or '0'
end
return table.concat(flags)
