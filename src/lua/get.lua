-- get: reads one job. ARGV: P, id.
-- Returns nil, or {state, topic, body, due, ttr_ms, attempts, retries, created}.
local j = redis.call('HMGET', job_key(ARGV[2]), 's', 't', 'b', 'd', 'ttr', 'n', 'r', 'c')
if not j[1] then return nil end
return j
