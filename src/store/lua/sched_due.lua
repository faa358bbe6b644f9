-- sched_due: the schedules of the shard whose next fire is due, for the
-- timer that fires them (the holder of the shard's bucket 0).
-- flags: no-writes
-- KEYS: P. ARGV: limit.
-- Returns {Redis now ms, earliest next fire ms or -1, id1, {cron, every, tz,
-- start, end, anchor, next}, id2, ...} with up to limit due schedules.
local limit = tonumber(ARGV[1])
local now = now_ms()
local key = P .. ':sched'
local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local out = {now, first[2] and tonumber(first[2]) or -1}
local due = redis.call('ZRANGEBYSCORE', key, '-inf', num(now), 'LIMIT', '0', num(limit))
for _, id in ipairs(due) do
    out[#out + 1] = id
    out[#out + 1] = redis.call('HMGET', sched_key(id), 'cron', 'ev', 'tz', 'st', 'en', 'a', 'n')
end
return out
