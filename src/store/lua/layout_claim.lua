-- layout_claim: records the bucket and shard counts a process chose for a
-- new deployment (shards unset, on a Cluster), unless a process recorded
-- counts first; returns what is recorded then, so every process of the
-- deployment uses the first process' choice. It runs on data of any
-- stored layout: it writes only where nothing is recorded yet.
-- flags: any-layout
-- KEYS: P.
-- argv: buckets:int shards:int
-- reply: buckets shards
local call = args()
layout_mismatch(call.buckets, call.shards) -- records them where none are yet
local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
return reply{buckets = known[1], shards = known[2]}
