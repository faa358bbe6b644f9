-- schedules: reads one schedule, or every schedule of the shard by id.
-- flags: no-writes
-- KEYS: P.
-- argv: allow id?
-- reply entry: id schedule
-- reply schedule: topic cron every_s tz start_s end_s anchor_s next_ms last_ms missed ttr_ms retries created_ms body
-- id is absent for all (those of topics the caller may not use are left
-- out).
-- Returns an `entry` per schedule; body only for one id (else false).
-- Error: DQ_NOT_FOUND when id names no schedule the caller may see.
local call = args()
limit_topics(call.allow)
local one = call.id
local ids = {one}
if not one then ids = redis.call('ZRANGE', P .. ':sched:ids', 0, -1) end
local out = {}
for _, id in ipairs(ids) do
    local s = redis.call('HMGET', Key.sched(id), 't', 'cron', 'ev', 'tz', 'st', 'en', 'a', 'n', 'l',
        'm', 'ttr', 'r', 'c')
    if s[1] and allowed(s[1]) then
        local body = one and redis.call('HGET', Key.sched(id), 'b') or false
        local schedule = reply_schedule{topic = s[1], cron = s[2], every_s = s[3], tz = s[4],
            start_s = s[5], end_s = s[6], anchor_s = s[7], next_ms = s[8], last_ms = s[9],
            missed = s[10], ttr_ms = s[11], retries = s[12], created_ms = s[13], body = body}
        reply_entry({id = id, schedule = schedule}, out)
    end
end
if one and #out == 0 then return redis.error_reply('DQ_NOT_FOUND') end
return out
