-- touch: a reserved job's TTR deadline becomes now + ttr.
-- ARGV: P, id. Returns 'not_found', 'conflict:<state>' or {'ok', deadline}.
local id = ARGV[2]
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 'ttr', 'k')
if not j[1] then return 'not_found' end
if j[1] ~= 'reserved' then return 'conflict:' .. j[1] end
local due = now_ms() + tonumber(j[2])
redis.call('HSET', jk, 'd', num(due))
schedule(id, j[3], due)
return {'ok', due}
