-- lib/70-history.lua: history: kept records, delivery logs, what a get shows.

-- Kept history. In a topic whose policy has `keep` (keep_ms > 0), a job
-- that is finished or deleted leaves a record for that long: the string
-- P:h:<id> (RECORD: outcome, created, due, first delivery, ended (ms, -1
-- where unknown), attempts, the topic's length; then the topic, then the
-- grouping key), with a PEXPIRE of keep. While it exists, `add` of the
-- id answers DQ_CONFLICT with the outcome and its time (the idempotency
-- window) and `get` answers the record. P:hf:<topic> and P:hd:<topic>
-- index a topic's finished and deleted records for `jobs`, scored by
-- minus the ended time, so that their ascending order (which `jobs` and
-- its cursors page) is newest first. An id is in at most one of its
-- topic's indexes. Each write of a record trims the topic's indexes
-- lazily (trim_history) and sets the index's PEXPIRE to at least keep, so
-- an index outlives its newest record by no more than that.
-- P:history exists while some topic of the shard keeps history, and for
-- KEEP_MAX_MS after the last one stopped (policy.lua): without it, no
-- function reads a policy or a record for history's sake, so keep 0
-- costs one EXISTS per call.
local RECORD = '<Bi8i8i8i8I4B'
local OUTCOME_CODE = {finished = 1, deleted = 2}
local OUTCOME_NAME = {'finished', 'deleted'}
-- How many index entries one record write may trim at most: more than the
-- one it adds, so the trimming keeps up.
local HISTORY_TRIM_STEP = 8
function Key.history_flag() return P .. ':history' end

local function history_on()
    if history_cache == nil then
        history_cache = redis.call('EXISTS', Key.history_flag()) == 1
    end
    return history_cache
end

-- How long the topic's finished and deleted jobs are kept (ms; 0: not).
local function keep_of(topic)
    if not history_on() then return 0 end
    return policy_of(topic).keep_ms or 0
end

-- The record of job `id`, as a table (outcome, t topic, c created, du due,
-- fd first delivery, e ended, n attempts, g key or nil), or nil.
local function load_record(id)
    local v = redis.call('GET', Key.record(id))
    if not v then return nil end
    local o, c, du, fd, e, n, tlen, at = struct.unpack(RECORD, v)
    local g = string.sub(v, at + tlen)
    return {id = id, outcome = OUTCOME_NAME[o], topic = string.sub(v, at, at + tlen - 1),
        created = c, due_asked = du, first_delivery = fd, ended = e, attempts = n,
        key = g ~= '' and g or nil}
end

-- Does a record (of topic `topic`, ended at `ended`) stand behind an index
-- entry? An entry outlives its record when the record expired, or was
-- replaced by a later one of the same id (in another topic, once this one
-- had expired).
local function record_of_entry(id, topic, ended)
    local r = load_record(id)
    if r and r.topic == topic and r.ended == ended then return r end
    return nil
end

-- Trims a topic's history indexes: entries older than keep (their records
-- expired, or were written under a longer keep since lowered) and, while
-- the two hold more than HISTORY_CAP entries, the oldest; at most
-- HISTORY_TRIM_STEP of them, oldest first. A trimmed entry's record goes
-- with it.
local function trim_history(topic, now, keep)
    local keys = {Key.history_index(topic, 'finished'), Key.history_index(topic, 'deleted')}
    local total = redis.call('ZCARD', keys[1]) + redis.call('ZCARD', keys[2])
    for _ = 1, HISTORY_TRIM_STEP do
        local oldest, key
        for _, k in ipairs(keys) do
            local last = redis.call('ZRANGE', k, '-1', '-1', 'WITHSCORES')
            if last[2] and (not oldest or tonumber(last[2]) > oldest[2]) then
                oldest, key = {last[1], tonumber(last[2])}, k
            end
        end
        if not oldest or (total <= HISTORY_CAP and -oldest[2] >= now - keep) then return end
        redis.call('ZREM', key, oldest[1])
        if record_of_entry(oldest[1], topic, -oldest[2]) then
            redis.call('DEL', Key.record(oldest[1]), Key.delivery(oldest[1]))
        end
        total = total - 1
    end
end

-- Leaves the record of job j (as load_job answered it, whole), which is
-- being removed as `kind` ('finished' or 'deleted'), for keep ms.
local function keep_record(id, j, kind, keep)
    local now = clock()
    redis.call('SET', Key.record(id), struct.pack(RECORD, OUTCOME_CODE[kind], j.created, j.due_asked or -1,
        j.first_delivery or -1, now, j.attempts, #j.topic) .. j.topic .. (j.key or ''), 'PX', num(keep))
    local other = kind == 'finished' and 'deleted' or 'finished'
    redis.call('ZREM', Key.history_index(j.topic, other), id)
    local ik = Key.history_index(j.topic, kind)
    redis.call('ZADD', ik, num(-now), id)
    trim_history(j.topic, now, keep)
    if redis.call('PTTL', ik) < keep then redis.call('PEXPIRE', ik, num(keep)) end
end

-- Delivery log. A push job's callback attempts, oldest first, in the list
-- P:dl:<id>: one MessagePack array per attempt (at: when its outcome was
-- recorded, ms; the HTTP status, the error text, its duration in ms and
-- the response body's first bytes, false where there was none; decision:
-- finished, deleted, retry or buried; retry_at: when a retry is due, ms,
-- else false). At most DELIVERY_LOG_MAX entries, the oldest dropped. The
-- list lives with the job and goes with it, or stays as long as its
-- record (remove_job).
-- reply delivery: at status error ms response decision retry_at
local function log_delivery(id, e)
    local key = Key.delivery(id)
    redis.call('RPUSH', key, cmsgpack.pack({e.at, e.status or false, e.error or false, e.ms or false,
        e.response or false, e.decision, e.retry_at or false}))
    redis.call('LTRIM', key, num(-DELIVERY_LOG_MAX), '-1')
end

-- A failed attempt's log entry fields (e) completed with what after_failure
-- decided (state: its answer; j: the job it wrote), then logged.
local function log_failed_delivery(id, j, state, now, e)
    e.at = now
    if state == 'buried' then
        e.decision = 'buried'
    else
        e.decision, e.retry_at = 'retry', state == 'delay' and j.due or now
    end
    log_delivery(id, e)
end

-- The delivery log as get answers it (false when there is none).
local function deliveries_view(id)
    local list = redis.call('LRANGE', Key.delivery(id), '0', '-1')
    if #list == 0 then return false end
    local out = {}
    for i, v in ipairs(list) do
        local x = cmsgpack.unpack(v)
        out[i] = reply_delivery{at = x[1], status = x[2], error = x[3], ms = x[4], response = x[5],
            decision = x[6], retry_at = x[7]}
    end
    return out
end

-- Notes job j's first delivery (now) when its topic keeps history, for
-- its record: the job is then written whole (its tail grows), once.
local function note_delivery(j, now)
    if j.attempts == 1 and keep_of(j.topic) > 0 then j.first_delivery, j.whole = now, true end
end

-- A record as get and `jobs` answer it: job_view's fields, state its
-- outcome, no body, ttr or retries.
-- reply job_view: state topic body due ttr_ms attempts retries created backoff url timeout_ms last_at last_status last_error key traceparent tracestate ended first_delivered deliveries
local function record_view(r)
    return reply_job_view{state = r.outcome, topic = r.topic, body = false, due = r.due_asked, ttr_ms = false,
        attempts = r.attempts, retries = false, created = r.created, backoff = false, url = false,
        timeout_ms = false, last_at = false, last_status = false, last_error = false,
        key = r.key or false, traceparent = false, tracestate = false, ended = r.ended,
        first_delivered = r.first_delivery, deliveries = deliveries_view(r.id)}
end

-- A purge deletes the jobs created up to its first step in the shard
-- (purge.lua), which it tells by their creation time, in ms. That step
-- records when it began (P:purging: topic -> ms, kept PURGING_MS, enough
-- for the rest of that millisecond); a job created after it in the same
-- millisecond is noted in P:purge_born ("<created>:<id>", kept
-- PURGE_BORN_MS after the last note or purge step), so the purge keeps it.
local PURGING_MS, PURGE_BORN_MS = 1000, 3600000
local function note_if_born_in_purge(id, topic, now)
    local began = purging_cache[topic]
    if began == nil then
        began = tonumber(redis.call('HGET', P .. ':purging', topic)) or false
        purging_cache[topic] = began
    end
    if began == now then
        redis.call('SADD', P .. ':purge_born', num(now) .. ':' .. id)
        redis.call('PEXPIRE', P .. ':purge_born', num(PURGE_BORN_MS))
    end
end

-- Drops the kept record of `id` (r, as load_record answered it), its
-- entry in its topic's history index and its delivery log: for an upsert
-- that makes the id live again (an id is kept or live, never both; the
-- log, which expires with the record, would otherwise expire under the
-- new job).
local function drop_record(id, r)
    redis.call('ZREM', Key.history_index(r.topic, r.outcome), id)
    redis.call('DEL', Key.record(id), Key.delivery(id))
end

-- What get answers about a job (nil when there is none), false where a
-- job has none: backoff is its steps in ms, last_at, last_status and
-- last_error its last callback attempt, key its grouping key, traceparent
-- and tracestate its trace context, ended -1, first_delivered its first
-- delivery or -1. Also each entry of a `jobs` page. The job as load_job
-- read it comes second (the record, for a record).
-- A kept record (nil when the job is live) answers as record_view.
local function job_view(id)
    local j = load_job(id)
    if not j then
        local r = load_record(id)
        if not r then return nil end
        return record_view(r), r
    end
    -- false, not nil, where a job has no such field: a nil would end the
    -- reply there (Redis stops an array at its first nil).
    local function opt(x)
        if x == nil then return false end
        return x
    end
    return reply_job_view{state = j.state, topic = j.topic, body = job_body(j), due = j.due, ttr_ms = j.ttr,
        attempts = j.attempts, retries = j.retries, created = j.created, backoff = opt(j.backoff), url = opt(j.url),
        timeout_ms = opt(j.timeout), last_at = opt(j.last_attempt_at), last_status = opt(j.last_status),
        last_error = opt(j.last_error), key = opt(j.key), traceparent = opt(j.traceparent), tracestate = opt(j.tracestate),
        ended = -1, first_delivered = j.first_delivery or -1, deliveries = j.push and deliveries_view(id)}, j
end

