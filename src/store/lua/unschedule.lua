-- unschedule: removes a schedule. Jobs it already fired stay.
-- KEYS: P (the schedule's shard).
-- argv: allow:text id:text
-- Returns 'ok'. Error: DQ_NOT_FOUND (no such schedule, or one of a topic
-- the caller may not use: the two answer alike).
local call = args()
limit_topics(call.allow)
local id = call.id
local topic = redis.call('HGET', Key.sched(id), 't')
if not topic or not allowed(topic) then return redis.error_reply('DQ_NOT_FOUND') end
redis.call('DEL', Key.sched(id))
redis.call('ZREM', P .. ':sched', id)
redis.call('ZREM', P .. ':sched:ids', id)
return 'ok'
