-- release: a reserved job goes back to delay (or ready when delay is 0), or
-- is buried when it has used all its retries.
-- KEYS: P. ARGV: allow, id, delay_ms.
-- Returns the new state: 'delay', 'ready' or 'buried'.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved.
limit_topics(ARGV[1])
local id, delay = ARGV[2], tonumber(ARGV[3])
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 't', 'k', 'n', 'r', 'kb')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
if j[1] ~= 'reserved' then return redis.error_reply('DQ_CONFLICT ' .. j[1]) end
local topic, k = j[2], j[3]
redis.call('ZREM', bucket_key(k), id)
if retries_spent(j[4], j[5], j[6]) then
    bury(id, topic, reserve_seq(1))
    move_count(topic, 'reserved', 'buried')
    return 'buried'
end
if delay <= 0 then
    make_ready(id, topic, reserve_seq(1))
    move_count(topic, 'reserved', 'ready')
    return 'ready'
end
local due = now_ms() + delay
redis.call('HSET', jk, 's', 'delay', 'd', num(due))
schedule(id, k, due)
move_count(topic, 'reserved', 'delay')
return 'delay'
