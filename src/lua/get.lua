-- get: reads one job. ARGV: P, id.
-- Returns nil, or {state, topic, body, due, ttr_ms, attempts, retries, created}.
local id = ARGV[2]
local j = redis.call('HMGET', job_key(id), 's', 't', 'd', 'ttr', 'n', 'r', 'c')
if not j[1] then return nil end
return {j[1], j[2], redis.call('GET', body_key(id)), j[3], j[4], j[5], j[6], j[7]}
