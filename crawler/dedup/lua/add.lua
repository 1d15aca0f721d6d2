local slices = load()
if not slices then return redis.error_reply('NOFILTER ' .. meta .. ' does not exist') end
local flags, grown, full, done, added, later = {}, {}, 0, 0, 0, {}
for i = 1, count do flags[i] = '0' end
local function grow()
  local cur = slices[#slices]
  local nxt = slice(cur.index + 1)
  if not nxt then full = 1 return end
  redis.call('HSET', meta, 'slices', nxt.index + 1, 's' .. cur.index .. ':count', cur.count,
             's' .. nxt.index .. ':count', 0)
  slices[#slices + 1] = nxt
  local items = 0
  for _, s in ipairs(slices) do items = items + s.count end
  grown[#grown + 1] = {nxt.index, items, nxt.capacity}
end
local function filled() return slices[#slices].count >= slices[#slices].capacity end
while done < count do
  if filled() and full == 0 then grow() end
  local cur = slices[#slices]
  local room = cur.capacity - cur.count
  if room <= 0 then room = count end
  local idx = {}
  for i = done + 1, math.min(count, done + room) do idx[#idx + 1] = i end
  done = done + #idx
  local new = insert(cur, unseen(slices, #slices - 1, idx), later)
  for _, i in ipairs(new) do flags[i] = '1' end
  cur.count = cur.count + #new
  added = added + #new
end
if filled() and full == 0 then grow() end
local last = slices[#slices]
if added > 0 then redis.call('HSET', meta, 's' .. last.index .. ':count', last.count) end
return {table.concat(flags), grown, full, later}
