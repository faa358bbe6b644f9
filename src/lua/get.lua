-- get: reads one job.
-- flags: no-writes
-- KEYS: P. ARGV: allow, id.
-- Returns {state, topic, body, due, ttr_ms, attempts, retries, created,
-- backoff ms list, url, timeout_ms, last attempt ms, its status, its error}
-- (false where a job has none).
-- Error: DQ_NOT_FOUND (no such job, or not the caller's topic).
limit_topics(ARGV[1])
local id = ARGV[2]
local j = redis.call('HMGET', job_key(id), 's', 't', 'd', 'ttr', 'n', 'r', 'c', 'bo', 'u', 'to',
    'la', 'ls', 'le')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
return {j[1], j[2], redis.call('GET', body_key(id)), j[3], j[4], j[5], j[6], j[7], j[8], j[9],
    j[10], j[11], j[12], j[13]}
