-- sweep: forgets topics that have held no job for `retention` ms: their
-- counters, and their entries in P:topics and P:idle, so one-off topics do
-- not pile up. delayq-timer runs it.
-- KEYS: P.
-- argv: retention_ms:int limit:int
-- Returns the number forgotten.
local call = args()
local retention, limit = call.retention_ms, call.limit
local old = redis.call('ZRANGEBYSCORE', P .. ':idle', '-inf', num(now_ms() - retention),
    'LIMIT', '0', num(limit))
local forgotten = 0
for _, topic in ipairs(old) do
    redis.call('ZREM', P .. ':idle', topic)
    local jobs = tonumber(redis.call('HGET', Key.stats(topic), 'jobs') or '0')
    if jobs == 0 then
        redis.call('DEL', Key.stats(topic), Key.ready(topic), Key.buried(topic), Key.delay(topic, false),
            Key.delay(topic, true), Key.reserved_index(topic), Key.push_index(topic), Key.hold(topic))
        redis.call('ZREM', P .. ':topics', topic)
        forgotten = forgotten + 1
    end
end
return forgotten
