-- ready: how many jobs each topic has ready in this shard, to find where a
-- pop should look when a worker knows of none (delayq-fcgi keeps hints from
-- the ready messages; this is the exact answer when they run dry).
-- flags: no-writes
-- KEYS: P.
-- argv: topics:text...
-- Returns one count per topic: what a pop could take (0 for a paused
-- topic; at most the room the shard's share of a `concurrency` leaves).
local out = {}
for i, topic in ipairs(args().topics) do
    local n = 0
    if not paused(topic) then
        n = redis.call('ZCARD', Key.ready(topic))
        local room = concurrency_room(topic)
        if room and room < n then n = room end
    end
    out[i] = n
end
return out
