-- layout_claim: records the bucket and shard counts a process chose for a
-- new deployment (shards unset, on a Cluster), unless a process recorded
-- counts first; returns what is recorded then, so every process of the
-- deployment uses the first process' choice. It runs on data of any
-- stored layout: it writes only where nothing is recorded yet.
-- flags: any-layout
-- KEYS: P. ARGV: buckets, shards. Returns {buckets, shards}.
layout_mismatch(ARGV[1], ARGV[2]) -- records them where none are yet
local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
return {known[1], known[2]}
