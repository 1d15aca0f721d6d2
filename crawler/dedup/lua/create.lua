local function plan(set)
  for i = 0, tonumber(ARGV[6]) - 1 do
    local at, p = 7 + i * 3, 's' .. i .. ':'
    set(p .. 'capacity', ARGV[at]); set(p .. 'bits', ARGV[at + 1])
    set(p .. 'hashes', ARGV[at + 2])
  end
end
if redis.call('EXISTS', meta) == 1 then
  local stored = redis.call('HMGET', meta, 'capacity', 'error_rate', 'growth', 'piece_bits')
  if stored[4] and stored[1] == ARGV[2] and stored[2] == ARGV[3] and stored[3] == ARGV[4] then
    -- a filter planned with fewer slices: the slices it lacks (those it has stay)
    plan(function(f, v) redis.call('HSETNX', meta, f, v) end)
  end
  return {stored[1], stored[2], stored[3]}
end
redis.call('HSET', meta, 'capacity', ARGV[2], 'error_rate', ARGV[3], 'growth', ARGV[4],
           'piece_bits', ARGV[5], 'slices', 1, 'version', 3, 's0:count', 0)
plan(function(f, v) redis.call('HSET', meta, f, v) end)
return {ARGV[2], ARGV[3], ARGV[4]}
