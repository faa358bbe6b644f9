-- get: reads one job.
-- flags: no-writes
-- KEYS: P. ARGV: allow, id.
-- Returns job_view (common.lua): {state, topic, body, due, ttr_ms, attempts,
-- retries, created, backoff ms list, url, timeout_ms, last attempt ms, its
-- status, its error} (false where a job has none).
-- Error: DQ_NOT_FOUND (no such job, or not the caller's topic).
limit_topics(ARGV[1])
local j = job_view(ARGV[2])
if not j or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
return j
