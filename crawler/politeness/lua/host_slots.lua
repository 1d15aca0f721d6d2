-- Renew one worker's share of the cluster-wide concurrency of each host, in one call.
-- KEYS[i]: the slots hash of host i (field: worker id, value: "held,want,expires_ms,served_ms").
-- ARGV[1]: the worker id; ARGV[2]: how long its entries live (ms); then per host i the
-- triple limit, want, in_flight at ARGV[3i], ARGV[3i+1], ARGV[3i+2].
-- Returns the grant of each host: how many of its requests the worker may have in flight.
-- Invariant: the sum of every live entry's held is at most the limit, and a worker's in-flight
-- count never exceeds its held (it starts requests only below its grant, and held is at
-- least both its grant and its in-flight count when it was last renewed).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, ttl = ARGV[1], tonumber(ARGV[2])

local function parse(value)
  local held, want, expires, served = string.match(value, '^(%d+),(%d+),(%d+),(%d+)$')
  if not held then return nil end
  return tonumber(held), tonumber(want), tonumber(expires), tonumber(served)
end

-- max-min fair shares of limit among the wants: the smallest wants first, then the most
-- recently served (so a worker left out when limit < workers gets the next turn)
local function fair_share(wanting, limit)
  table.sort(wanting, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    if a[3] ~= b[3] then return a[3] > b[3] end
    return a[2] < b[2]
  end)
  local remaining, n = limit, #wanting
  for k, entry in ipairs(wanting) do
    local alloc = math.min(entry[1], math.floor(remaining / (n - k + 1)))
    if entry[2] == me then return alloc end
    remaining = remaining - alloc
  end
  return 0
end

local function renew(key, limit, want, in_flight)
  local flat = redis.call('HGETALL', key)
  local others, wanting, served = 0, {}, 0
  for j = 1, #flat, 2 do
    local held, wants, expires, last = parse(flat[j + 1])
    if flat[j] == me then
      served = last or 0
    elseif held and expires > now then
      others = others + held
      if wants > 0 then table.insert(wanting, {wants, flat[j], last}) end
    else
      redis.call('HDEL', key, flat[j])
    end
  end
  local grant = 0
  if want > 0 then
    table.insert(wanting, {want, me, served})
    grant = math.min(fair_share(wanting, limit), math.max(limit - others, 0))
  end
  if grant > 0 then served = now end
  local held = math.max(grant, in_flight)
  if held > 0 or want > 0 then
    redis.call('HSET', key, me, held .. ',' .. want .. ',' .. (now + ttl) .. ',' .. served)
    redis.call('PEXPIRE', key, ttl * 2)
  else
    redis.call('HDEL', key, me)
  end
  return grant
end

local grants = {}
for i, key in ipairs(KEYS) do
  local base = 3 * i
  grants[i] = renew(key, tonumber(ARGV[base]), tonumber(ARGV[base + 1]),
                    tonumber(ARGV[base + 2]))
end
return grants
