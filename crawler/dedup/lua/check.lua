local slices, flags, idx = load(), {}, {}
if not slices then return redis.error_reply('NOFILTER ' .. meta .. ' does not exist') end
local last = slices[#slices]
if last.count > last.capacity and not slice(last.index + 1) then
  return {string.rep('0', count), 1}  -- full for good: filter nothing rather than too much
end
for i = 1, count do flags[i] = '1'; idx[i] = i end
for _, i in ipairs(unseen(slices, #slices, idx)) do flags[i] = '0' end
return {table.concat(flags), 0}
