-- bury: a reserved job is set aside until kicked.
-- ARGV: P, id. Returns 'ok', 'not_found' or 'conflict:<state>'.
local id = ARGV[2]
local j = redis.call('HMGET', job_key(id), 's', 't', 'k')
if not j[1] then return 'not_found' end
if j[1] ~= 'reserved' then return 'conflict:' .. j[1] end
redis.call('ZREM', bucket_key(j[3]), id)
bury(id, j[2])
move_count(j[2], 'reserved', 'buried')
flush()
return 'ok'
