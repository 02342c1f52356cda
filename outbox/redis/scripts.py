"""The worker's Lua scripts: each a step on one queue's keys that must not be split.

Every key a script touches is in its ``KEYS`` and under the queue's hash tag
(``outbox.redis.names``), so on Redis Cluster each runs on the queue's one node. Entry
fields are passed as flat ``field, value`` lists; ``OWNED`` is the guard of every write
that ends a delivery otherwise than with an ack: the entry must still be pending on this
worker's consumer, or the lease was lost (``XAUTOCLAIM`` gave it to another worker) and
nothing is written — the one who holds it now settles it.

- ``FETCH``: nothing while the queue is paused; else ``XREADGROUP`` the band streams
  most urgent first until ``count`` entries (one round trip, never more than asked);
- ``RECLAIM``: ``XAUTOCLAIM`` the entries idle past the lease, each with its delivery
  count (``XPENDING``), which is its attempt; entries deleted meanwhile are acked;
- ``DEFER``: a retry, a snooze or an early delivery: the job's new fields go into the
  delayed set (``names.delayed_key``), scored by when it is due, and the entry leaves;
- ``PROMOTE``: the delayed jobs now due back to their streams (new entries); returns how
  many moved and when the next one is due;
- ``BURY``: a copy on the dead stream, and the entry leaves;
- ``EXTEND``: reset the idle time of the entries this worker still holds (the lease).
"""

from __future__ import annotations

_OWNED = """
local function owned(stream, group, id, consumer)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  return p[1] ~= nil and p[1][2] == consumer
end
"""

FETCH = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
local out = {0}
local left = tonumber(ARGV[3])
for i = 2, #KEYS do
  if left <= 0 then break end
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', left,
                       'STREAMS', KEYS[i], '>')
  if r then
    local entries = r[1][2]
    if #entries > 0 then
      table.insert(out, {i - 2, entries})
      left = left - #entries
    end
  end
end
return out
"""

RECLAIM = """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], '0-0',
                     'COUNT', ARGV[4])
local out = {}
for _, e in ipairs(r[2]) do
  if e and e[2] then
    local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
    if p[1] then table.insert(out, {e[1], e[2], p[1][4]}) end
  elseif e then
    redis.call('XACK', KEYS[1], ARGV[1], e[1])
  end
end
if r[3] then
  for _, id in ipairs(r[3]) do redis.call('XACK', KEYS[1], ARGV[1], id) end
end
return out
"""

DEFER = _OWNED + """
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
"""

PROMOTE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
  local e = cjson.decode(m)
  local key = KEYS[e.s + 3]
  if key then
    redis.call('XADD', key, '*', unpack(e.f))
  else
    redis.call('XADD', KEYS[2], '*', 'data', m)
  end
  redis.call('ZREM', KEYS[1], m)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, nxt[2] or false}
"""

BURY = _OWNED + """
if ARGV[5] == '1' and not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XADD', KEYS[2], '*', 'data', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
"""

EXTEND = _OWNED + """
local n = 0
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[i], ARGV[2]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    n = n + 1
  end
end
return n
"""
