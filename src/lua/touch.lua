-- touch: a reserved job's TTR deadline becomes now + ttr.
-- KEYS: P. ARGV: allow, id. Returns the new deadline (Unix ms).
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved.
limit_topics(ARGV[1])
local id = ARGV[2]
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 't', 'ttr', 'k')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
if j[1] ~= 'reserved' then return redis.error_reply('DQ_CONFLICT ' .. j[1]) end
local due = now_ms() + tonumber(j[3])
redis.call('HSET', jk, 'd', num(due))
schedule(id, j[4], due, j[2], 'reserved')
return due
