-- ready: how many jobs each topic has ready in this shard, to find where a
-- pop should look when a worker knows of none (delayq-fcgi keeps hints from
-- the ready messages; this is the exact answer when they run dry).
-- flags: no-writes
-- KEYS: P. The arguments are topics (no fixed ones).
-- Returns one count per topic (0 for a paused topic: a pop would take
-- none).
local out = {}
for i, topic in ipairs(ARGV) do
    out[i] = paused(topic) and 0 or redis.call('ZCARD', ready_key(topic))
end
return out
