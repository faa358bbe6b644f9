-- schedules: reads one schedule, or every schedule of the shard by id.
-- flags: no-writes
-- KEYS: P. ARGV: allow, id ('' for all; those of topics the caller may not
--       use are left out).
-- Returns {id1, {topic, cron, every, tz, start, end, anchor, next, last,
-- missed, ttr, retries, created, body}, id2, ...}; body only for one id
-- (else false).
-- Error: DQ_NOT_FOUND when id names no schedule the caller may see.
limit_topics(ARGV[1])
local one = ARGV[2]
local ids = {one}
if one == '' then ids = redis.call('ZRANGE', P .. ':sched:ids', 0, -1) end
local out = {}
for _, id in ipairs(ids) do
    local s = redis.call('HMGET', sched_key(id), 't', 'cron', 'ev', 'tz', 'st', 'en', 'a', 'n', 'l',
        'm', 'ttr', 'r', 'c')
    if s[1] and allowed(s[1]) then
        s[14] = one ~= '' and redis.call('HGET', sched_key(id), 'b') or false
        out[#out + 1] = id
        out[#out + 1] = s
    end
end
if one ~= '' and #out == 0 then return redis.error_reply('DQ_NOT_FOUND') end
return out
