"""The Lua outbox runs on Redis, one script a step that must not be split.

## The relay's hand-off (``HANDOFF``)

Redis runs a script atomically, so for each message in turn the check and the write are
one step: a message whose seen marker (``names.seen_key``) is still there was handed off
already and is not added again (a relay that died between Redis's reply and its COMMIT
re-publishes the same message ids; the markers live for the dedupe window); a new one is
``XADD``-ed to its stream and its marker set with ``PX window``, holding the entry id.

A stream at its length limit refuses: the limit is checked against ``XLEN`` before each
add, the message is not added and no marker is set, so its intent stays pending and a
later batch tries again. Nothing is trimmed (no ``MAXLEN``): a limit never drops work a
worker has not read. Since messages are taken in the batch's order and a full stream
stays full for the rest of the call, an ordering key's later messages are refused after
its first refused one: a key's order holds.

Every key a call touches carries the queue's hash tag, so on Redis Cluster the call runs
on the queue's node (``redis-py``'s ``Script`` sends ``EVALSHA`` and loads the script
on ``NOSCRIPT``).

KEYS: per message, its seen marker then its stream. ARGV: the window (ms), the length
limit (0: none), and the messages' fields as one JSON array holding, per message, its
field/value pairs in one flat array (one argument decoded by Redis's own cjson: redis-py
encodes each argument in Python, which cost more than the script with one argument per
field). The reply, per message: ``{0, entry id}`` added, ``{1, entry id}`` a duplicate,
``{2, length}`` refused at that length.

## The worker's steps

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

ADDED, DUPLICATE, FULL = 0, 1, 2

HANDOFF = """
local window = ARGV[1]
local limit = tonumber(ARGV[2])
local fields = cjson.decode(ARGV[3])
local room = {}
local out = {}
for i = 1, #KEYS / 2 do
  local seen, stream = KEYS[2 * i - 1], KEYS[2 * i]
  local had = redis.call('GET', seen)
  if had then
    out[i] = {1, had}
  else
    local left = room[stream]
    if left == nil then
      left = limit > 0 and limit - redis.call('XLEN', stream) or -1
    end
    if limit > 0 and left <= 0 then
      out[i] = {2, tostring(limit - left)}
    else
      local id = redis.call('XADD', stream, '*', unpack(fields[i]))
      redis.call('SET', seen, id, 'PX', window)
      if limit > 0 then left = left - 1 end
      out[i] = {0, id}
    end
    room[stream] = left
  end
end
return out
"""

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
