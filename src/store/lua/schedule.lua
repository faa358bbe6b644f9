-- schedule: creates a schedule (periodic job), or replaces the one of that
-- id. The caller (C) has checked the definition and computed the first fire.
-- KEYS: P (the schedule's shard: store_shard_of(id)). ARGV: allow, id,
--       topic, body, ttr_ms, retries, cron expression ('' for every),
--       every_s (0 for cron), tz, start_s, end_s (-1: none), anchor_s,
--       next_ms (-1: none), backoff (JSON array of seconds, ''), callback
--       url (''), callback timeout_ms: what each fire's job gets.
-- A replacement keeps the history of the id (last fire, missed count,
-- created); the definition and next fire are the new ones.
-- Returns {'created' | 'replaced', last fire ms or -1, missed}.
-- Error (nothing written): DQ_CONFLICT when the id is a schedule of a topic
-- the caller may not use.
limit_topics(ARGV[1])
local id = ARGV[2]
local sk = sched_key(id)
local old = redis.call('HMGET', sk, 't', 'l', 'm', 'c')
if old[1] and not allowed(old[1]) then return redis.error_reply('DQ_CONFLICT') end
local last, missed = old[2] or '-1', old[3] or '0'
redis.call('DEL', sk)
redis.call('HSET', sk, 't', ARGV[3], 'b', ARGV[4], 'ttr', ARGV[5], 'r', ARGV[6], 'cron', ARGV[7],
    'ev', ARGV[8], 'tz', ARGV[9], 'st', ARGV[10], 'en', ARGV[11], 'a', ARGV[12], 'n', ARGV[13],
    'l', last, 'm', missed, 'c', old[4] or num(now_ms()), 'bo', ARGV[14], 'u', ARGV[15],
    'to', ARGV[16])
redis.call('ZADD', P .. ':sched:ids', '0', id)
sched_set_next(id, tonumber(ARGV[13]))
return {old[1] and 'replaced' or 'created', tonumber(last), tonumber(missed)}
