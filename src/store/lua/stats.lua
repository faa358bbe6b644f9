-- stats: the counters of one topic, or one page of topics by name.
-- flags: no-writes
-- KEYS: P.
-- argv: topic? cursor? limit:int
-- reply: totals next_cursor topics
-- reply entry: topic fields
-- topic is absent for a page of all topics; cursor lists the topics after
-- this one (absent: from the start). next_cursor is false on the last page; totals
-- ({field, value, ...}) and the number of topics are for the whole
-- deployment, whatever the page. An `entry` per topic follows, its fields
-- {field, value, ...}. Each topic's fields end with
-- 'paused' (0 or 1); for a topic with a policy, 'throttled' and
-- 'keys_waiting' (limits_use()); and, when it has ready jobs that pop
-- could take or a paused topic's held push jobs, 'ready_age' (ms since
-- the oldest of them became ready: its rt, or c for jobs made before rt
-- existed). Ready push jobs not held wait in P:push with every topic's;
-- lag.lua reports them.
local call = args()
local topic, cursor, limit = call.topic, call.cursor, call.limit
local topics, next_cursor = topics_page(P .. ':topics', topic, cursor, limit)
local out = reply{totals = redis.call('HGETALL', P .. ':totals'), next_cursor = next_cursor,
    topics = redis.call('ZCARD', P .. ':topics')}
local now = now_ms()
-- The time the oldest member of a sorted set became ready, or nil.
local function ready_since(key)
    local first = redis.call('ZRANGE', key, 0, 0)
    if not first[1] then return nil end
    local j = load_job(first[1], true, nil, 'ready')
    return j and (j.ready_at or j.created)
end
for _, t in ipairs(topics) do
    local fields = redis.call('HGETALL', Key.stats(t))
    fields[#fields + 1] = 'paused'
    fields[#fields + 1] = redis.call('SISMEMBER', Key.paused(), t)
    if has_policy(policy_of(t)) then
        local use = limits_use(t, now)
        fields[#fields + 1] = 'throttled'
        fields[#fields + 1] = use.throttled
        fields[#fields + 1] = 'keys_waiting'
        fields[#fields + 1] = use.keys_waiting
    end
    local since = ready_since(Key.ready(t))
    local held = ready_since(Key.hold(t))
    if held and (not since or held < since) then since = held end
    if since then
        fields[#fields + 1] = 'ready_age'
        fields[#fields + 1] = math.max(0, now - since)
    end
    reply_entry({topic = t, fields = fields}, out)
end
return out
