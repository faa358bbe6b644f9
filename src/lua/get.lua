-- get: reads one job.
-- flags: no-writes
-- KEYS: P. ARGV: allow, id.
-- Returns {state, topic, body, due, ttr_ms, attempts, retries, created}.
-- Error: DQ_NOT_FOUND (no such job, or not the caller's topic).
limit_topics(ARGV[1])
local id = ARGV[2]
local j = redis.call('HMGET', job_key(id), 's', 't', 'd', 'ttr', 'n', 'r', 'c')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
return {j[1], j[2], redis.call('GET', body_key(id)), j[3], j[4], j[5], j[6], j[7]}
