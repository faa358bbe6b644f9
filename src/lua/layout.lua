-- layout: the bucket and shard counts this deployment records in a shard
-- (nil where none yet), read by a process when it starts.
-- flags: no-writes
-- KEYS: P. Returns {buckets, shards}.
local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
return {known[1], known[2]}
