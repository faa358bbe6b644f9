-- sched_due: the schedules of the shard whose next fire is due, for the
-- timer that fires them (the holder of the shard's bucket 0).
-- flags: no-writes
-- KEYS: P.
-- argv: limit:int
-- reply: now earliest
-- reply due: id schedule
-- reply schedule: cron every_s tz start_s end_s anchor_s next_ms version
-- now is Redis' time (ms), earliest the earliest next fire (ms) or -1; a
-- `due` follows them for each of up to limit due schedules. version is
-- the definition's (0 for a schedule stored before versions), for fire.
local call = args()
local limit = call.limit
local now = now_ms()
local key = P .. ':sched'
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local out = reply{now = now, earliest = first[2] and tonumber(first[2]) or -1}
local due = redis.call('ZRANGEBYSCORE', key, '-inf', num(now), 'LIMIT', '0', num(limit))
for _, id in ipairs(due) do
    local s = redis.call('HMGET', Key.sched(id), 'cron', 'ev', 'tz', 'st', 'en', 'a', 'n', 'v')
    local schedule = reply_schedule{cron = s[1], every_s = s[2], tz = s[3], start_s = s[4],
        end_s = s[5], anchor_s = s[6], next_ms = s[7], version = s[8] or 0}
    reply_due({id = id, schedule = schedule}, out)
end
return out
