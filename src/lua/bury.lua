-- bury: a reserved job is set aside until kicked.
-- KEYS: P. ARGV: allow, id. Returns 'ok'.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved.
limit_topics(ARGV[1])
local id = ARGV[2]
local j = redis.call('HMGET', job_key(id), 's', 't', 'k')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
if j[1] ~= 'reserved' then return redis.error_reply('DQ_CONFLICT ' .. j[1]) end
unschedule(id, j[3], j[2], 'reserved')
bury(id, j[2], reserve_seq(1))
move_count(j[2], 'reserved', 'buried')
return 'ok'
