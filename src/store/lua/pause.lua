-- pause: pauses or resumes a topic in this shard (delayq-fcgi calls every
-- shard in one round). A paused topic is in P:paused: pop takes nothing
-- from it and push_take holds its push jobs back in P:ph:<topic>.
-- KEYS: P.
-- argv: op topic limit:int
-- op is 'pause' or 'resume'.
-- pause: Returns 0.
-- resume: takes the topic out of P:paused, tells parked long-polls how many
-- jobs it has ready ("<count>:<topic>" on P:ready) the first time, and
-- moves up to `limit` held push jobs back to P:push (oldest first, with
-- their scores, so their order is kept; push_take holds newer ones back
-- until the hold is empty). Returns the number still held: the caller
-- calls again until 0.
local call = args()
local op, topic, limit = call.op, call.topic, call.limit
if op == 'pause' then
    redis.call('SADD', Key.paused(), topic)
    return 0
end
if redis.call('SREM', Key.paused(), topic) == 1 then
    local ready = redis.call('ZCARD', Key.ready(topic))
    if ready > 0 then
        redis.call('SPUBLISH', P .. ':ready', num(ready) .. ':' .. topic)
    end
end
local back = unhold_oldest(topic, limit)
if back > 0 then
    redis.call('SPUBLISH', P .. ':pushwake', num(back))
end
return redis.call('ZCARD', Key.hold(topic))
