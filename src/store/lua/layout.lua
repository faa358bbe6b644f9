-- layout: what a shard records of its deployment's layout, read by a
-- process when it starts and by /health and /metrics.
-- flags: no-writes any-layout
-- KEYS: P. No arguments.
-- reply: buckets shards stored recorded known
-- stored is the shard's layout, recorded 1 when P:layout records it (else
-- 0: nothing recorded it yet, see stored_layout()), with nil where the
-- shard holds nothing yet; known is the layout these functions use
-- (LAYOUT).
local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
return reply{buckets = known[1], shards = known[2], stored = stored_layout() or false,
    recorded = redis.call('EXISTS', Key.layout()), known = LAYOUT}
