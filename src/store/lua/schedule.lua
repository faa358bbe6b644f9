-- schedule: creates a schedule (periodic job), or replaces the one of that
-- id. The caller (C) has checked the definition and computed the first fire
-- from now_ms, its idea of Redis' time.
-- KEYS: P (the schedule's shard: store_shard_of(id)).
-- argv: allow id topic body ttr_ms retries cron every_s tz start_s end_s anchor_s next_ms backoff url timeout_ms now_ms
-- cron is the expression ('' for every), every_s 0 for cron; end_s and
-- next_ms -1 for none; backoff (a JSON array of seconds, or ''), the
-- callback url ('') and its timeout_ms are what each fire's job gets.
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
limit_topics(ARGV[ARG.allow])
local id = ARGV[ARG.id]
local sk = Key.sched(id)
local old = redis.call('HMGET', sk, 't', 'l', 'm', 'c', 'v')
if old[1] and not allowed(old[1]) then return redis.error_reply('DQ_CONFLICT') end
local last, missed = old[2] or '-1', old[3] or '0'
local now = now_ms()
if math.abs(tonumber(ARGV[ARG.now_ms]) - now) > 1000
    or tonumber(ARGV[ARG.next_ms]) <= tonumber(last) then
    return reply{result = 'retry', last_ms = tonumber(last), missed = tonumber(missed), now_ms = now}
end
redis.call('DEL', sk)
redis.call('HSET', sk, 't', ARGV[ARG.topic], 'b', ARGV[ARG.body], 'ttr', ARGV[ARG.ttr_ms],
    'r', ARGV[ARG.retries], 'cron', ARGV[ARG.cron], 'ev', ARGV[ARG.every_s], 'tz', ARGV[ARG.tz],
    'st', ARGV[ARG.start_s], 'en', ARGV[ARG.end_s], 'a', ARGV[ARG.anchor_s],
    'n', ARGV[ARG.next_ms], 'l', last, 'm', missed, 'c', old[4] or num(now),
    'v', num((tonumber(old[5]) or 0) + 1),
    'bo', ARGV[ARG.backoff], 'u', ARGV[ARG.url], 'to', ARGV[ARG.timeout_ms])
redis.call('ZADD', P .. ':sched:ids', '0', id)
sched_set_next(id, tonumber(ARGV[ARG.next_ms]))
return reply{result = old[1] and 'replaced' or 'created', last_ms = tonumber(last),
    missed = tonumber(missed), now_ms = now}
