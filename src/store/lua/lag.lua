-- lag: what an operator alerts on beyond the per-topic figures, for
-- /metrics: how far this shard's timers are behind.
-- flags: no-writes
-- KEYS: P. No arguments.
-- reply: now overdue push_since paused timers
-- reply timer: token late_ms at_ms
-- now in ms; overdue the due time of the oldest overdue bucket entry (a
-- delayed job past its due time or a reserved one past its TTR deadline,
-- not moved yet) or -1; push_since the time the oldest ready push job of
-- P:push became ready or -1; paused the number of paused topics; timers a
-- list of `timer` entries, one after the other: a timer's token, its
-- lateness, when it was recorded.
-- The overdue figure is per shard, not per topic: each bucket's head (of
-- reserved jobs) and the heads of its delay sets that P:bt says may be
-- due (their scores there may be early: a removal leaves them), at most
-- SETS_LOOKED of them per bucket. The timers are those alive in P:timers,
-- with what their moves recorded in P:timerlag (see move.lua).
local SETS_LOOKED = 100
local now = now_ms()
local nb = tonumber(redis.call('GET', P .. ':buckets') or '0')
local overdue = -1
local function consider(key)
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local due = head[2] and tonumber(head[2])
    if due and due <= now and (overdue < 0 or due < overdue) then overdue = due end
end
for k = 0, nb - 1 do
    consider(Key.bucket(k))
    local sets = redis.call('ZRANGEBYSCORE', Key.bucket_sets(k), '-inf', num(now), 'LIMIT', '0',
        num(SETS_LOOKED))
    for _, name in ipairs(sets) do consider(P .. ':' .. name) end
end
local push_since = -1
local first = redis.call('ZRANGE', Key.push(), 0, 0)
if first[1] then
    local j = load_job(first[1], true, nil, 'ready')
    push_since = j and (j.ready_at or j.created) or -1
end
local timers = {}
local lags = redis.call('HGETALL', P .. ':timerlag')
for i = 1, #lags, 2 do
    local score = redis.call('ZSCORE', P .. ':timers', lags[i])
    local lat, at = string.match(lags[i + 1], '^(%d+):(%d+)$')
    if score and tonumber(score) > now and lat then
        reply_timer({token = lags[i], late_ms = tonumber(lat), at_ms = tonumber(at)}, timers)
    end
end
return reply{now = now, overdue = overdue, push_since = push_since,
    paused = redis.call('SCARD', Key.paused()), timers = timers}
