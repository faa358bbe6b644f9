-- move: the timer's step for one bucket. Due delayed jobs become ready;
-- reserved jobs past their TTR deadline are redelivered: at once, or after
-- their backoff step, or buried when their retries are spent. Bucket 0's
-- move also moves back key lanes whose key_rate token came (lib/60-limits.lua).
-- KEYS: P.
-- argv: bucket:int limit:int timer?
-- reply: moved earliest now
-- timer is its lock token (absent: records nothing); earliest the bucket's
-- earliest remaining due ms (bucket 0: or the next key_rate token's, if
-- sooner) or -1; now Redis' time in ms.
-- The timer's lateness (now minus the oldest due time moved) goes to
-- P:timerlag as "<lateness ms>:<recorded at ms>" under its token: the
-- largest of the moves within a second, for /metrics (lag.lua).
-- Delayed jobs move without being read: each delay set of the bucket
-- (P:bt) whose due entries go to its topic's ready set, or P:push for a
-- set of callbacks, as they are (due_jobs_go, the due edge); their heads
-- still say delay, which load_job reads as ready once the job has left its
-- delay set. Only a reserved job whose TTR ran out is read (its retries,
-- its backoff).
local call = args()
local k, limit, timer = num(call.bucket), call.limit, call.timer or ''
local bk, sets_key = Key.bucket(k), Key.bucket_sets(k)
local now = clock() -- the call's one reading of Redis' time
local moved, oldest = 0, nil -- oldest: the earliest due time moved

-- Reserved jobs past their deadline. Every job is read before anything is
-- written: Redis does not undo a script's writes when it fails midway, so
-- a job that cannot be read must fail the call while its bucket entry is
-- still in place (the timer retries and reports it).
local expired = redis.call('ZRANGEBYSCORE', bk, '-inf', num(now), 'WITHSCORES', 'LIMIT', '0', num(limit))
local ids, jobs = {}, {}
for i = 1, #expired, 2 do
    local id = expired[i]
    -- A bucket entry is removed with its job, so the job exists and is
    -- reserved; after_failure needs the backoff steps, among the fields
    -- only some jobs have.
    local j = load_job(id, true)
    if j.more then j = load_job(id) end
    ids[#ids + 1], jobs[#jobs + 1] = id, j
end
if #ids > 0 then
    oldest = tonumber(expired[2])
    -- The ids are the bucket's lowest-ranked entries, so rank removal is exact.
    redis.call('ZREMRANGEBYRANK', bk, '0', num(#ids - 1))
    local by_topic, topic_order = {}, {}
    for i, id in ipairs(ids) do
        local j = jobs[i]
        local topic = j.topic
        local list = list_for(by_topic, topic_order, Key.reserved_index(topic))
        list[#list + 1] = id
        -- A callback's reservation ran out (its pusher died, or the
        -- outcome was not recorded): a failed attempt, as PROTOCOL says.
        if j.push then count(topic, 'push_failed', 1) end
        local state = after_failure(id, j, now, nil, true)
        if state ~= 'buried' then count(topic, 'redelivered', 1) end
        if j.push then
            log_failed_delivery(id, j, state, now, {error = 'no outcome recorded by the deadline'})
        end
    end
    -- (after_failure may put a job in a delay set, never back in the
    -- reserved index: one ZREM per index is enough)
    for _, ik in ipairs(topic_order) do call_in_chunks('ZREM', ik, by_topic[ik]) end
    moved = #ids
end

-- Delay sets with due jobs, up to what the limit leaves.
local sets = redis.call('ZRANGEBYSCORE', sets_key, '-inf', num(now), 'LIMIT', '0', num(limit))
for _, name in ipairs(sets) do
    if moved >= limit then break end
    local key = P .. ':' .. name
    local topic, push = delay_set_of(name)
    local due = redis.call('ZRANGEBYSCORE', key, '-inf', num(now), 'WITHSCORES', 'LIMIT', '0',
        num(limit - moved))
    local n = #due / 2
    if n > 0 then
        if not oldest or tonumber(due[2]) < oldest then oldest = tonumber(due[2]) end
        due_jobs_go(key, topic, push, due)
        moved = moved + n
    end
    -- the set's score in P:bt becomes its head's again (or it leaves P:bt)
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if head[2] then
        redis.call('ZADD', sets_key, head[2], name)
    else
        redis.call('ZREM', sets_key, name)
    end
end

if oldest and timer ~= '' then
    local late = now - oldest
    local old = redis.call('HGET', P .. ':timerlag', timer)
    local ol, oa = string.match(old or '', '^(%d+):(%d+)$')
    if not oa or tonumber(oa) <= now - 1000 or tonumber(ol) < late then
        redis.call('HSET', P .. ':timerlag', timer, num(late) .. ':' .. num(now))
    end
end
local earliest = bucket_earliest(k) or -1
-- Bucket 0's move also runs a step of the shard's lane drains and lets
-- the key lanes whose key_rate token is due go (lanes_drain_step), and its
-- timer wakes for the next one too.
if k == '0' then
    local next_rate = lanes_drain_step()
    if next_rate and (earliest < 0 or next_rate < earliest) then earliest = next_rate end
end
return reply{moved = moved, earliest = earliest, now = now}
