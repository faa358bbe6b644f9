-- schedule: creates a schedule (periodic job), or replaces the one of that
-- id. The caller (C) has checked the definition and computed the first fire
-- from now_ms, its idea of Redis' time.
-- KEYS: P (the schedule's shard: store_shard_of(id)).
-- argv: allow id topic body ttr_ms:int retries:int cron? every_s:int tz start_s:int end_s:int anchor_s:int next_ms:int backoff? url? timeout_ms:int now_ms:int
-- cron is the expression (absent for every), every_s 0 for cron; start_s,
-- end_s and next_ms -1 for none; backoff (a JSON array of seconds), the
-- callback url and its timeout_ms are what each fire's job gets. The
-- schedule's hash keeps '' for an absent cron, backoff or url.
-- A replacement keeps the history of the id (last fire, missed count,
-- created); the definition and next fire are the new ones, and its
-- version (v) goes up by one, so a fire planned on the old definition
-- is stale (fire.lua).
-- reply: result last_ms missed now_ms
-- result is 'created' or 'replaced'; last_ms the last fire or -1. It is
-- 'retry' (nothing written) when now_ms is more than a second off Redis'
-- time, or next_ms is not after the last fire (a fire time that made a job
-- is never made again): the caller computes the first fire again, strictly
-- after the reply's now_ms (Redis' time) and last_ms.
-- Error (nothing written): DQ_CONFLICT when the id is a schedule of a topic
-- the caller may not use.
local call = args()
limit_topics(call.allow)
local id = call.id
local sk = Key.sched(id)
local old = redis.call('HMGET', sk, 't', 'l', 'm', 'c', 'v')
if old[1] and not allowed(old[1]) then return redis.error_reply('DQ_CONFLICT') end
local last, missed = old[2] or '-1', old[3] or '0'
local now = now_ms()
if math.abs(call.now_ms - now) > 1000 or call.next_ms <= tonumber(last) then
    return reply{result = 'retry', last_ms = tonumber(last), missed = tonumber(missed), now_ms = now}
end
redis.call('DEL', sk)
redis.call('HSET', sk, 't', call.topic, 'b', call.body, 'ttr', num(call.ttr_ms),
    'r', num(call.retries), 'cron', call.cron or '', 'ev', num(call.every_s), 'tz', call.tz,
    'st', num(call.start_s), 'en', num(call.end_s), 'a', num(call.anchor_s),
    'n', num(call.next_ms), 'l', last, 'm', missed, 'c', old[4] or num(now),
    'v', num((tonumber(old[5]) or 0) + 1),
    'bo', call.backoff or '', 'u', call.url or '', 'to', num(call.timeout_ms))
redis.call('ZADD', P .. ':sched:ids', '0', id)
sched_set_next(id, call.next_ms)
return reply{result = old[1] and 'replaced' or 'created', last_ms = tonumber(last),
    missed = tonumber(missed), now_ms = now}
