-- move: the timer's step for one bucket. Due delayed jobs become ready;
-- reserved jobs past their TTR deadline are redelivered: at once, or after
-- their backoff step, or buried when their retries are spent. Bucket 0's
-- move also moves back key lanes whose key_rate token came (common.lua).
-- KEYS: P.
-- argv: bucket limit timer
-- reply: moved earliest now
-- timer is its lock token ('' records nothing); earliest the bucket's
-- earliest remaining due ms (bucket 0: or the next key_rate token's, if
-- sooner) or -1; now Redis' time in ms.
-- The timer's lateness (now minus the oldest due time moved) goes to
-- P:timerlag as "<lateness ms>:<recorded at ms>" under its token: the
-- largest of the moves within a second, for /metrics (lag.lua).
local k, limit, timer = ARGV[ARG.bucket], tonumber(ARGV[ARG.limit]), ARGV[ARG.timer] or ''
local bk = bucket_key(k)
local now = clock() -- the call's one reading of Redis' time
local due = redis.call('ZRANGEBYSCORE', bk, '-inf', num(now), 'WITHSCORES', 'LIMIT', '0', num(limit))
local ids = {}
for i = 1, #due, 2 do ids[#ids + 1] = due[i] end
-- Every job is read before anything is written: Redis does not undo a
-- script's writes when it fails midway, so a job that cannot be read must
-- fail the call while its bucket entry is still in place (the timer
-- retries and reports it).
local jobs = {}
for i, id in ipairs(ids) do
    -- A bucket entry is removed with its job, so the job exists and is
    -- delay or reserved.
    local j = load_job(id, true)
    -- after_failure needs the backoff steps, among the fields only some jobs have
    if j.s == 'reserved' and j.more then j = load_job(id) end
    jobs[i] = j
end
if #ids > 0 and timer ~= '' then
    local late = now - tonumber(due[2])
    local old = redis.call('HGET', P .. ':timerlag', timer)
    local ol, oa = string.match(old or '', '^(%d+):(%d+)$')
    if not oa or tonumber(oa) <= now - 1000 or tonumber(ol) < late then
        redis.call('HSET', P .. ':timerlag', timer, num(late) .. ':' .. num(now))
    end
end
if #ids > 0 then
    -- The ids are the bucket's lowest-ranked entries, so rank removal is exact.
    redis.call('ZREMRANGEBYRANK', bk, '0', num(#ids - 1))
    local seq = reserve_seq(#ids)
    -- Index removals, one ZREM per index at the end: no job goes back into
    -- the index it left within the call (a reserved job may enter the
    -- delay index, never the reserved one).
    local unindexed, index_order = {}, {}
    for i, id in ipairs(ids) do
        local j = jobs[i]
        local topic = j.t
        local list = list_for(unindexed, index_order, state_index(topic, j.s))
        list[#list + 1] = id
        if j.s == 'delay' then
            make_ready(id, j, seq + i - 1)
            move_count(topic, 'delay', 'ready')
        else
            -- A callback's reservation ran out (its pusher died, or the
            -- outcome was not recorded): a failed attempt, as PROTOCOL says.
            if j.push then count(topic, 'push_failed', 1) end
            local state = after_failure(id, j, now)
            if state ~= 'buried' then count(topic, 'redelivered', 1) end
            if j.push then
                log_failed_delivery(id, j, state, now, {error = 'no outcome recorded by the deadline'})
            end
        end
    end
    for _, ik in ipairs(index_order) do call_in_chunks('ZREM', ik, unindexed[ik]) end
end
local head = redis.call('ZRANGE', bk, 0, 0, 'WITHSCORES')
local earliest = -1
if head[2] then earliest = tonumber(head[2]) end
-- Bucket 0's move also runs a step of the shard's lane drains and lets
-- the key lanes whose key_rate token is due go (lanes_drain_step), and its
-- timer wakes for the next one too.
if k == '0' then
    local next_rate = lanes_drain_step()
    if next_rate and (earliest < 0 or next_rate < earliest) then earliest = next_rate end
end
return reply{moved = #ids, earliest = earliest, now = now}
