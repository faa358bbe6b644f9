-- release: a reserved job goes back to delay, or is buried when it has used
-- all its retries. Without a delay it is a failed delivery: ready at once,
-- or after its backoff step when it has one.
-- KEYS: P. ARGV: allow, id, delay_ms.
-- Returns the new state: 'delay', 'ready' or 'buried'.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved.
limit_topics(ARGV[1])
local id, delay = ARGV[2], tonumber(ARGV[3])
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 't', 'k', 'n', 'r', 'kb', 'u', 'bo')
if not j[1] or not allowed(j[2]) then return redis.error_reply('DQ_NOT_FOUND') end
if j[1] ~= 'reserved' then return redis.error_reply('DQ_CONFLICT ' .. j[1]) end
local topic, k = j[2], j[3]
unschedule(id, k, topic, 'reserved')
if delay <= 0 or retries_spent(j[4], j[5], j[6]) then
    return after_failure(id, {topic, k, j[4], j[5], j[6], j[7], j[8]}, now_ms())
end
local due = now_ms() + delay
redis.call('HSET', jk, 's', 'delay', 'd', num(due))
schedule(id, k, due, topic, 'delay')
move_count(topic, 'reserved', 'delay')
return 'delay'
