"""The Lua the relay runs on Redis: one call hands off one queue's share of a batch.

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
