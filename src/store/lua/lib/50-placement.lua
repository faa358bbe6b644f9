-- lib/50-placement.lua: placement: buckets, delay sets and the timers' wake-ups; retries and backoff.

-- The bucket that moves a topic's delayed jobs: every delay set of the
-- topic lives in one bucket, so a timer moves a topic's due jobs without
-- reading them, and `jobs` pages them from one set. A hash of the name
-- (any, as long as it never changes: it is part of the stored layout)
-- over the deployment's bucket count, read once per shard and library
-- load.
local bucket_counts = {}
local function topic_bucket(topic)
    local known = topic_buckets[topic]
    if known then return known end
    local nb = bucket_counts[P]
    if not nb then
        nb = tonumber(redis.call('GET', P .. ':buckets'))
        -- (a shard with a job has its counts: the first add writes them)
        if not nb then return 0 end
        bucket_counts[P] = nb
    end
    local h = 0
    for i = 1, #topic do h = (h * 31 + string.byte(topic, i)) % 4294967296 end
    topic_buckets[topic] = h % nb
    return h % nb
end

-- The earliest due time among bucket k's entries: its reserved jobs' TTR
-- deadlines and its delay sets' heads (a score in P:bt may be earlier than
-- its set's head; see Key.bucket_sets); false when it has none.
local function bucket_earliest(k)
    local head = false
    for _, key in ipairs({Key.bucket(k), Key.bucket_sets(k)}) do
        local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        local due = first[2] and tonumber(first[2])
        if due and (not head or due < head) then head = due end
    end
    return head
end

-- The wake-up horizon of a timer whose lease is lease_ms: it reads the
-- head of every bucket it holds within this of any instant (src/job/job.h).
local function lease_horizon(lease_ms)
    return math.floor(lease_ms / 3) + HEAD_RECHECK_MS + HEAD_READ_SPARE_MS
end

-- The shard's wake-up horizon, as its timers' maintain recorded it (lock.lua);
-- WAKE_HORIZON_MS, the longest lease's, while none is. Read once per call.
local function wake_horizon()
    if horizon_cache == nil then
        horizon_cache = tonumber(redis.call('GET', P .. ':horizon')) or WAKE_HORIZON_MS
    end
    return horizon_cache
end

-- Timers sleep until their buckets' earliest entry, so they are told when
-- an entry due at `due` becomes bucket k's earliest; unless it is due
-- beyond the wake-up horizon, within which the timer holding the bucket
-- reads its head anyway: such a job (an add's usual delay of minutes or
-- more, a pop's TTR deadline beyond a few seconds) costs no read of the
-- head and no message. A bucket's head is read once per call: entries
-- added by one call (a batch add, a pop of many) compare against what the
-- call already added. Called before the entry is added.
local function wake_if_earliest(k, due)
    local head = bucket_heads[k]
    -- (a job due sooner, later in this call, still reads the head: the
    -- entries gathered but not written yet are all later than it; the
    -- longest horizon first, which needs no read)
    if head == nil and (due >= clock() + WAKE_HORIZON_MS or due >= clock() + wake_horizon()) then
        return
    end
    if head == nil then head = bucket_earliest(k) end
    if not head or due < head then
        redis.call('SPUBLISH', P .. ':wake', num(k) .. ':' .. num(due))
        head = due
    end
    bucket_heads[k] = head
end

-- A job's due set is where a timer finds it at its due time: a delayed
-- job's delay set (which its topic's bucket lists in P:bt), a reserved
-- job's bucket.
-- Takes job j out of its bucket ('reserved') or its delay set ('delay'),
-- and a reserved one out of its topic's reserved index. Its bucket's
-- P:bt score stays: the move corrects it.
local function due_set_remove(id, j, state)
    if state == 'delay' then
        redis.call('ZREM', Key.delay(j.topic, j.push), id)
    elseif state == 'reserved' then
        redis.call('ZREM', Key.bucket(j.bucket), id)
        redis.call('ZREM', Key.reserved_index(j.topic), id)
    end
end

-- Puts job j, (now) in `state`, where a timer finds it at `due`: delayed,
-- in its topic's delay set, which its topic's bucket lists in P:bt;
-- reserved, in its own bucket (TTR deadlines are per job: the move reads
-- the job anyway) and its topic's reserved index. batched: the set
-- entries wait for flush(), one ZADD per set and call; only for callers
-- that read none of these sets again before the end of the call (add,
-- fire, pop), since until then the job is not in them.
local function due_set_add(id, j, due, state, batched)
    if state == 'reserved' then
        wake_if_earliest(j.bucket, due)
        zadd(Key.bucket(j.bucket), num(due), id, not batched)
        zadd(Key.reserved_index(j.topic), num(due), id, not batched)
        return
    end
    local name, k = delay_set_name(j.topic, j.push), topic_bucket(j.topic)
    wake_if_earliest(k, due)
    zadd(P .. ':' .. name, num(due), id, not batched)
    -- P:bt's score only ever falls here (LT); one ZADD per set and call
    -- unless a later job of the call is due sooner.
    local listed = delay_listed[name]
    if not listed or due < listed then
        redis.call('ZADD', Key.bucket_sets(k), 'LT', num(due), name)
        delay_listed[name] = due
    end
end

-- True when a reserved job has used every delivery its retries allow.
local function retries_spent(n, r, kb)
    r = tonumber(r)
    return r >= 0 and tonumber(n) - tonumber(kb) >= r + 1
end

-- The job id that touch, release or bury may act on, or nil and the error
-- to answer: DQ_NOT_FOUND unless it is of a topic the call may use
-- (limit_topics), DQ_CONFLICT unless it is reserved by a pop. A callback
-- job is reserved by delayq-push while its request is in flight, and only
-- that request's outcome may end the reservation (else it could be sent
-- again, or expire, while the first still runs).
local function reserved_job(id)
    local j = load_job(id)
    if not j or not allowed(j.topic) then return nil, redis.error_reply('DQ_NOT_FOUND') end
    if j.state ~= 'reserved' then return nil, redis.error_reply('DQ_CONFLICT ' .. j.state) end
    if j.push then return nil, redis.error_reply('DQ_CONFLICT delivering') end
    return j
end

-- The topics a listing by name answers (stats, policies): just {topic}
-- when one is named, else a page of at most limit names of the sorted set
-- key (all of score 0) after cursor (nil: from the start). Returns the
-- topics and the next page's cursor, false on the last page.
local function topics_page(key, topic, cursor, limit)
    if topic then return {topic}, false end
    local from = cursor and ('(' .. cursor) or '-'
    local topics = redis.call('ZRANGEBYLEX', key, from, '+', 'LIMIT', '0', num(limit + 1))
    if #topics <= limit then return topics, false end
    topics[#topics] = nil
    return topics, topics[#topics]
end

-- Backoff steps in seconds as a JSON array ("[15,180.5]") -> "15000,180500".
local function backoff_ms(text)
    local out = {}
    for x in string.gmatch(text, '[^%[%],]+') do
        out[#out + 1] = num(math.floor(tonumber(x) * 1000 + 0.5))
    end
    return table.concat(out, ',')
end

