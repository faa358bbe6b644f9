-- layout: what a shard records of its deployment's layout, read by a
-- process when it starts and by /health and /metrics.
-- flags: no-writes any-layout
-- KEYS: P. Returns {buckets, shards, stored layout, 1 when P:layout
-- records it (else 0: nothing recorded it yet, see stored_layout())}, with
-- nil where the shard holds nothing yet, and the layout these functions
-- use (LAYOUT).
local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
return {known[1], known[2], stored_layout() or false, redis.call('EXISTS', layout_key()), LAYOUT}
