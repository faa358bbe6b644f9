-- release: a reserved job goes back to delay (or ready when delay is 0), or
-- is buried when it has used all its retries.
-- ARGV: P, id, delay_ms. Returns 'not_found', 'conflict:<state>', or the new
-- state: 'delay', 'ready' or 'buried'.
local id, delay = ARGV[2], tonumber(ARGV[3])
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 't', 'k', 'n', 'r', 'kb')
if not j[1] then return 'not_found' end
if j[1] ~= 'reserved' then return 'conflict:' .. j[1] end
local topic, k = j[2], j[3]
redis.call('ZREM', bucket_key(k), id)
if retries_spent(j[4], j[5], j[6]) then
    bury(id, topic)
    move_count(topic, 'reserved', 'buried')
    flush()
    return 'buried'
end
if delay <= 0 then
    make_ready(id, topic)
    move_count(topic, 'reserved', 'ready')
    flush()
    return 'ready'
end
local due = now_ms() + delay
redis.call('HSET', jk, 's', 'delay', 'd', num(due))
schedule(id, k, due)
move_count(topic, 'reserved', 'delay')
flush()
return 'delay'
