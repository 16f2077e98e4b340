// The cap of a call's timeline, in Lua, for every script that appends to one (queues/timeline.ts,
// queues/inbound.ts, src/state/kv.ts). Imports nothing of callsync.

/**
 * Lua: trims a timeline over its cap, but keeps its first entry — the call's receipt (source, call
 * id, numbers, when it came): a sink retrying for days must not leave a timeline that no longer says
 * which call it is. What goes first are the oldest sink attempts and retries that a later entry of the
 * same sink (or endpoint) superseded: a sink down for hours (a 429 again and again, two entries per
 * wait) then drops its own history, not the fan-out (which sinks the call was routed to) nor the
 * other sinks' outcomes; so do the receipts of duplicates but the newest (a sender resending one call
 * hundreds of times fills the list with them: the fan-out and the outcomes stay). Only when those are
 * not enough go the oldest entries, whatever they are (one
 * LTRIM, as before, and the receipt pushed back). Decodes the entries only when over the cap.
 * Shared by every script that appends to a timeline: queues/timeline.ts, the inbound log's append
 * (queues/inbound.ts), the sink state's release and marker scripts (src/state/kv.ts).
 */
export const TRIM_KEEPING_RECEIPT = `
local function trimKeepingReceipt(list, max)
  if max < 2 then return redis.call('LTRIM', list, -max, -1) end
  local entries = redis.call('LRANGE', list, 0, -1)
  local over = #entries - max
  if over <= 0 then return end
  local superseded, later, laterDuplicate = {}, {}, false
  for i = #entries, 2, -1 do
    local ok, e = pcall(cjson.decode, entries[i])
    if ok and type(e) == 'table' and type(e.sink) == 'string' then
      local label = e.sink .. '.' .. (type(e.endpoint) == 'string' and e.endpoint or '')
      if (e.event == 'attempt' or e.event == 'retry') and later[label] then superseded[i] = true end
      later[label] = true
    elseif ok and type(e) == 'table' and e.event == 'received' and e.revision == 'duplicate' then
      if laterDuplicate then superseded[i] = true end
      laterDuplicate = true
    end
  end
  local drop, dropped = {}, 0
  for i = 2, #entries do
    if dropped >= over then break end
    if superseded[i] then drop[i], dropped = true, dropped + 1 end
  end
  if dropped == 0 then
    redis.call('LTRIM', list, -(max - 1), -1)
    return redis.call('LPUSH', list, entries[1])
  end
  for i = 2, #entries do
    if dropped >= over then break end
    if not drop[i] then drop[i], dropped = true, dropped + 1 end
  end
  local kept = {}
  for i = 1, #entries do if not drop[i] then kept[#kept + 1] = entries[i] end end
  redis.call('LTRIM', list, 1, 0)
  for i = 1, #kept, 100 do redis.call('RPUSH', list, unpack(kept, i, math.min(i + 99, #kept))) end
end
`;
