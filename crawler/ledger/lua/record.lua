-- One ledger batch of a worker: plain counters, then record outcomes counted once each.
-- KEYS[1]: the crawl's ledger hash; KEYS[2..]: the seen sets of the partitions the batch names
-- ARGV[1]: JSON {"c": {field: n}, "r": [[k, offset, {field: n}], ...], "t": [[k, below], ...]}
--   c: added as they are; r: a record of partition KEYS[k] at offset (a string), whose fields
--   are added only the first time that offset is seen (a redelivered record's fields go to
--   "again/<field>"); t: offsets below `below` of KEYS[k] are forgotten (committed: never
--   delivered again).
local batch = cjson.decode(ARGV[1])
for field, n in pairs(batch.c) do
  redis.call('HINCRBY', KEYS[1], field, n)
end
local fresh = 0
for _, r in ipairs(batch.r) do
  local prefix = ''
  if redis.call('ZADD', KEYS[r[1]], 'NX', r[2], r[2]) == 1 then
    fresh = fresh + 1
  else
    prefix = 'again/'
  end
  for field, n in pairs(r[3]) do
    redis.call('HINCRBY', KEYS[1], prefix .. field, n)
  end
end
for _, t in ipairs(batch.t) do
  redis.call('ZREMRANGEBYSCORE', KEYS[t[1]], '-inf', '(' .. t[2])
end
return fresh
