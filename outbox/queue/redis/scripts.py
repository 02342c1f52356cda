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

KEYS: per message, its seen marker then its stream; last, the queue's wake stream
(``names.wake_stream``), added to once when the call added a keyed job (an idle worker
of keyed jobs blocks on it). ARGV: the window (ms), the length limit (0: none), and the
messages' fields as one JSON array holding, per message, its
field/value pairs in one flat array (one argument decoded by Redis's own cjson: redis-py
encodes each argument in Python, which cost more than the script with one argument per
field). The reply, per message: ``{0, entry id}`` added, ``{1, entry id}`` a duplicate,
``{2, length}`` refused at that length.

## The worker's steps

Every key a script touches is in its ``KEYS`` and under the queue's hash tag
(``outbox.queue.redis.names``), so on Redis Cluster each runs on the queue's one node. Entry
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
- ``EXTEND``: reset the idle time of the entries this worker still holds (the lease);
- ``ACK``: the acks of a burst (``XACK`` + ``XDEL`` on each stream), unless the queue's
  cancel hash (``names.cancel_key``) exists: then nothing, and the worker looks at which
  of them an operator cancelled before it acks the others (``outbox.queue.redis.lane``).

Keyed jobs (``outbox.queue.redis.ordered``) have three more, which keep an ordered partition's
one delivery out at a time:

- ``TAKE``: per partition, in turn from ``start``, until ``want`` entries: nothing while
  one of its entries is pending, unless it is this partition's held delivery now due
  (``XCLAIM`` with the delivery count it was held with) or one idle past the lease (a
  worker died: ``XCLAIM``, counted); else ``XREADGROUP COUNT 1``. Returns the queue's
  paused flag, when the next held delivery is due, and the wake stream's last id (so a
  blocking read after it misses no wake);
- ``HOLD``: a retry, a snooze or a hand-back of a keyed job: the entry stays pending
  (its partition's one delivery out) and the held hash notes its due time, the delivery
  count it gets back and its snooze count; idle workers are woken (their next ``TAKE``
  learns when it is due);
- ``RELEASE``: the acks of a burst of keyed jobs (``XACK`` + ``XDEL``), waking idle
  workers when a partition has entries behind the one acked; the cancel hash stops it
  as it stops ``ACK``. ``BURY`` wakes them too when given the wake stream.
"""

from __future__ import annotations

ADDED, DUPLICATE, FULL = 0, 1, 2

HANDOFF = """
local window = ARGV[1]
local limit = tonumber(ARGV[2])
local fields = cjson.decode(ARGV[3])
local room = {}
local out = {}
local woke = false
for i = 1, (#KEYS - 1) / 2 do
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
      woke = woke or string.find(stream, '}:ord:', 1, true) ~= nil
    end
    room[stream] = left
  end
end
if woke then redis.call('XADD', KEYS[#KEYS], 'MAXLEN', 1, '*', 'w', 1) end
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

_WAKE = """
local function wake(key, stream)
  if key and redis.call('XLEN', stream) > 0 then
    redis.call('XADD', key, 'MAXLEN', 1, '*', 'w', 1)
  end
end
"""

BURY = _OWNED + _WAKE + """
if ARGV[5] == '1' and not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XADD', KEYS[2], '*', 'data', ARGV[4])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
wake(KEYS[3], KEYS[1])
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

TAKE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {1} end
local group, consumer = ARGV[1], ARGV[2]
local want, now, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS - 3
local w = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local out = {0, false, w[1] and w[1][1] or '0-0'}
local nxt = false
local taken = 0
for k = 0, n - 1 do
  if taken >= want then break end
  local p = (tonumber(ARGV[6]) + k) % n
  local stream = KEYS[4 + p]
  local e, count, snoozes = nil, 1, 0
  local pend = redis.call('XPENDING', stream, group, '-', '+', 1)
  if pend[1] then
    local id = pend[1][1]
    local h = redis.call('HGET', KEYS[2], p)
    local hid, due, hcount, hsnoozes
    if h then hid, due, hcount, hsnoozes = string.match(h, '^(%S+) (%d+) (%d+) (%d+)$') end
    if h and hid == id then
      if tonumber(due) <= now then
        redis.call('HDEL', KEYS[2], p)
        local c = redis.call('XCLAIM', stream, group, consumer, 0, id, 'RETRYCOUNT', hcount)
        e, count, snoozes = c[1], tonumber(hcount), tonumber(hsnoozes)
      elseif not nxt or tonumber(due) < nxt then
        nxt = tonumber(due)
      end
    else
      if h then redis.call('HDEL', KEYS[2], p) end
      if pend[1][3] >= lease then
        local c = redis.call('XCLAIM', stream, group, consumer, lease, id)
        e, count = c[1], pend[1][4] + 1
      end
    end
    if e ~= nil and not (e and e[2]) then
      redis.call('XACK', stream, group, id)
      e = nil
    end
  else
    local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1,
                         'STREAMS', stream, '>')
    if r then e = r[1][2][1] end
  end
  if e then
    table.insert(out, {p, e[1], e[2], count, snoozes})
    taken = taken + 1
  end
end
out[2] = nxt
return out
"""

HOLD = _OWNED + """
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[2] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. ARGV[7])
redis.call('XADD', KEYS[3], 'MAXLEN', 1, '*', 'w', 1)
return 1
"""

# KEYS: the queue's cancel hash, then per stream acked; ARGV: the group, "1" to stop when
# the cancel hash exists (0 returned, nothing acked), then per stream its count of ids
# followed by the ids.
ACK = """
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local at = 3
for i = 2, #KEYS do
  local n = tonumber(ARGV[at])
  local ids = {unpack(ARGV, at + 1, at + n)}
  redis.call('XACK', KEYS[i], ARGV[1], unpack(ids))
  redis.call('XDEL', KEYS[i], unpack(ids))
  at = at + n + 1
end
return 1
"""

# KEYS: the wake stream, the cancel hash, then one stream per id; ARGV: the group, the
# cancel check as for ACK, then the ids (ARGV[i] is on KEYS[i]).
RELEASE = _WAKE + """
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local behind = nil
for i = 3, #KEYS do
  redis.call('XACK', KEYS[i], ARGV[1], ARGV[i])
  redis.call('XDEL', KEYS[i], ARGV[i])
  if not behind and redis.call('XLEN', KEYS[i]) > 0 then behind = KEYS[i] end
end
if behind then wake(KEYS[1], behind) end
return 1
"""
