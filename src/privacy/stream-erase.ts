// Erasing entries of a Redis stream for good. XDEL only marks an entry deleted: its fields stay in
// the stream's listpack node — in memory, in DUMP, in RDB snapshots and replicas' full syncs — until
// every other entry of that node is deleted too. So the stream is rewritten instead, in one script:
// the entries kept are added again under their own ids, the last generated id is restored, and each
// consumer group is created again with its last-delivered id and its pending entries given back to
// the consumers that held them (their delivery counts start again at 1).
import type { RedisClient } from '../../queues/connection.js';

const REWRITE = `
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local drop = {}
for i = 1, #ARGV do drop[ARGV[i]] = true end
local last = nil
local info = redis.call('XINFO', 'STREAM', key)
for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
local groups = {}
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local t = {}
  for i = 1, #g, 2 do t[g[i]] = g[i + 1] end
  local pending = {}
  if tonumber(t['pending']) > 0 then pending = redis.call('XPENDING', key, t['name'], '-', '+', t['pending']) end
  groups[#groups + 1] = { name = t['name'], last = t['last-delivered-id'], pending = pending }
end
local entries = redis.call('XRANGE', key, '-', '+')
redis.call('DEL', key)
local removed = 0
local before = {}
local previous = '0-0'
for _, e in ipairs(entries) do
  if drop[e[1]] then
    removed = removed + 1
  else
    redis.call('XADD', key, e[1], unpack(e[2]))
    before[e[1]] = previous
    previous = e[1]
  end
end
for _, g in ipairs(groups) do
  redis.call('XGROUP', 'CREATE', key, g.name, '0', 'MKSTREAM')
  for _, p in ipairs(g.pending) do
    local id, consumer = p[1], p[2]
    if before[id] then
      redis.call('XGROUP', 'SETID', key, g.name, before[id])
      redis.call('XREADGROUP', 'GROUP', g.name, consumer, 'COUNT', 1, 'STREAMS', key, '>')
    end
  end
  redis.call('XGROUP', 'SETID', key, g.name, g.last)
end
if last and redis.call('EXISTS', key) == 1 then redis.call('XSETID', key, last) end
return removed
`;

/** Removes `ids` from the stream at `key` without leaving their fields behind (see above); answers how many it removed. */
export async function eraseStreamEntries(redis: RedisClient, key: string, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0;
  return Number(await redis.eval(REWRITE, 1, key, ...ids));
}
