-- lib/60-limits.lua: limits: policies, key lanes and tokens, passing a key on.

-- A topic's flow-control policy: the hash P:pol:<topic>, a copy in every
-- shard (policy.lua writes them all), with the fields below (counts, and
-- periods and keep in ms); P:policies lists the topics that have one.
-- One more field is no limit but kept there because a pop reads the hash
-- anyway: LANES_DRAINING, while the topic's key lanes go back to its queue
-- (key_limit_changed). POLICY_FIELDS, the fields' names in order, comes
-- with the constants (src/job/job.h, DQ_POLICY_FIELDS).
local LANES_DRAINING = 'lanes_draining'
function Key.policy(topic) return P .. ':pol:' .. topic end
function Key.policies() return P .. ':policies' end

-- Does policy pol (as read_policy answers it) set any limit?
local function has_policy(pol)
    for _, f in ipairs(POLICY_FIELDS) do
        if pol[f] ~= nil then return true end
    end
    return false
end

-- The topic's policy in this shard: {field = number} of the fields set.
local function read_policy(topic)
    local h = redis.call('HGETALL', Key.policy(topic))
    local pol = {}
    for i = 1, #h, 2 do pol[h[i]] = tonumber(h[i + 1]) end
    return pol
end

-- The topic's policy, read once per call.
local function policy_of(topic)
    local pol = policy_cache[topic]
    if not pol then
        pol = read_policy(topic)
        policy_cache[topic] = pol
    end
    return pol
end

-- Per-key limits, continued (the keys are described above lane_remove).
-- A pop or push_take that takes a job of a key at its key_concurrency sets
-- it aside in the key's lane, once, and goes on to the next job; the end
-- of one of the key's reservations moves the lane's oldest job back to the
-- topic's queue at its old place (its sequence number), where the next pop
-- meets it before the key's later jobs. So each job costs O(1) lane moves
-- whatever the key's backlog, other keys' jobs behind a limited key's are
-- reached, and a key's jobs keep their due order.

-- Puts a lane job back in its topic's queue at sequence number seq, at
-- once (a pop later in the same call must see it before the key's later
-- jobs), and has its waiters told: long-polls by flush(), or the pushers.
local function requeue(id, topic, seq, push)
    if push then
        redis.call('ZADD', Key.push(), num(seq), id)
        redis.call('ZADD', Key.push_index(topic), num(seq), id)
        push_ready = push_ready + 1
    else
        redis.call('ZADD', Key.ready(topic), num(seq), id)
        note_ready(topic)
    end
end

-- Sets ready job j, just taken from its queue at sequence number seq,
-- aside in its key's lane.
local function lane_add(id, j, seq)
    local topic, key = j.topic, j.key
    redis.call('ZADD', Key.lane(topic, key), num(seq), id)
    redis.call('ZADD', Key.lanes_index(topic), num(seq), id)
    redis.call('ZADD', Key.keys_waiting(topic), '0', key)
    if j.push then redis.call('ZREM', Key.push_index(topic), id) end
end

-- Moves up to n of a key's oldest lane jobs back to the topic's queue;
-- returns how many.
local function lane_release(topic, key, n)
    local lk = Key.lane(topic, key)
    local jobs = redis.call('ZRANGE', lk, '0', num(n - 1), 'WITHSCORES')
    if #jobs == 0 then return 0 end
    local ids = {}
    for i = 1, #jobs, 2 do
        local id = jobs[i]
        local j = load_job(id, true) -- a lane entry goes with its job, so it exists
        ids[#ids + 1] = id
        requeue(id, topic, tonumber(jobs[i + 1]), j.push)
    end
    redis.call('ZREM', Key.lanes_index(topic), unpack(ids))
    redis.call('ZREMRANGEBYRANK', lk, '0', num(#ids - 1))
    if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', Key.keys_waiting(topic), key) end
    return #ids
end

-- A token bucket: the hash `bucket` (t: tokens, fractional; at: when
-- they were counted, ms) holds up to `rate` tokens and refills rate per
-- period_ms, continuously; an absent bucket is full (a full one is
-- deleted: it needs no state, and one refilled from empty takes period_ms,
-- its expiry). bucket_tokens reads the tokens there are at `now`
-- (fractional); token_wait is the ms until a whole one (0: one is there).
local function bucket_tokens(bucket, rate, period_ms, now)
    local h = redis.call('HMGET', bucket, 't', 'at')
    local tokens, at = tonumber(h[1]), tonumber(h[2])
    if not tokens or not at then return rate end
    return math.min(rate, tokens + math.max(0, now - at) * rate / period_ms)
end
local function token_wait(tokens, rate, period_ms)
    if tokens >= 1 then return 0 end
    return math.ceil((1 - tokens) * period_ms / rate)
end

-- Takes up to `want` tokens at `now`; returns how many it took and the ms
-- until the next whole token (token_wait).
local function take_tokens(bucket, rate, period_ms, want, now)
    local tokens = bucket_tokens(bucket, rate, period_ms, now)
    local taken = math.min(want, math.floor(tokens))
    tokens = tokens - taken
    if tokens >= rate then
        redis.call('DEL', bucket)
    else
        redis.call('HSET', bucket, 't', string.format('%.6f', tokens), 'at', num(now))
        redis.call('PEXPIRE', bucket, num(period_ms))
    end
    return taken, token_wait(tokens, rate, period_ms)
end

-- A key's lane waits for key_rate's next token, due at `at` (ms). When
-- that is the shard's earliest, the timer holding bucket 0 is told
-- ("0:<ms>" on P:wake, as for a job due in bucket 0): its move of bucket
-- 0 moves due lanes back (rate_lanes_due) and answers the next due time.
local function rate_lane_wait(topic, key, at)
    local rk = Key.rate_lanes()
    local first = redis.call('ZRANGE', rk, '0', '0', 'WITHSCORES')
    redis.call('ZADD', rk, 'LT', num(at), topic_key(topic, key))
    if not first[2] or at < tonumber(first[2]) then
        redis.call('SPUBLISH', P .. ':wake', '0:' .. num(at))
    end
end

-- Moves the oldest job of each lane whose next token is due at `now` back
-- to its queue (at most LANE_STEP lanes); returns the next due time of
-- the lanes left waiting (ms), or nil.
local function rate_lanes_due(now)
    local rk = Key.rate_lanes()
    local due = redis.call('ZRANGEBYSCORE', rk, '-inf', num(now), 'LIMIT', '0', num(LANE_STEP))
    for _, m in ipairs(due) do
        local topic, key = split_topic_key(m)
        lane_release(topic, key, 1)
    end
    if #due > 0 then redis.call('ZREM', rk, unpack(due)) end
    local first = redis.call('ZRANGE', rk, '0', '0', 'WITHSCORES')
    return first[2] and tonumber(first[2]) or nil
end

-- Moves up to n of a topic's lane jobs back to its queue, key by key, each
-- key's oldest first; when none is left the topic's drain is over (and,
-- without a key limit, its key structures are gone). Returns how many.
local function lanes_drain(topic, n)
    local moved = 0
    while moved < n do
        local key = redis.call('ZRANGE', Key.keys_waiting(topic), '0', '0')[1]
        if not key then break end
        moved = moved + lane_release(topic, key, n - moved)
    end
    if redis.call('EXISTS', Key.keys_waiting(topic)) == 0 then
        redis.call('SREM', Key.lanes_drain(), topic)
        redis.call('HDEL', Key.policy(topic), LANES_DRAINING)
        local pol = read_policy(topic)
        if not pol.key_concurrency and not pol.key_rate then
            redis.call('SREM', Key.key_limited(), topic)
        end
    end
    return moved
end

-- A step of the lane drains of the shard (policy changed or removed a key
-- limit): up to LANE_STEP jobs of the topics in P:kdrain go back, and one
-- of each lane whose key_rate token is due (rate_lanes_due). The move of
-- bucket 0 runs it (its timer moves it at least every few seconds, so a
-- drain finishes without a caller of its own), and so do push_take and a
-- pop of a topic with key limits, which need it done before they take.
-- Returns rate_lanes_due's next due time, or nil.
local function lanes_drain_step()
    if not keys_on() then return nil end
    local next_rate = rate_lanes_due(clock())
    local budget = LANE_STEP
    for _, topic in ipairs(redis.call('SRANDMEMBER', Key.lanes_drain(), '8')) do
        if budget <= 0 then break end
        budget = budget - lanes_drain(topic, budget)
    end
    return next_rate
end

-- Does the topic have a key limit, or key lanes going back to its queue?
-- Only then may its pops meet lanes that the step above moves; an
-- unlimited pop skips it, so it pays no call for the per-key limits (its
-- policy is read anyway).
local function key_limited(topic)
    local pol = policy_of(topic)
    return pol.key_concurrency ~= nil or pol.key_rate ~= nil or pol[LANES_DRAINING] ~= nil
end

-- May ready job j, just taken from its queue at sequence number seq, be
-- reserved now under its key's key_concurrency? If so it is counted
-- against its key (key_reservation_ends uncounts it); if not it is set
-- aside in its key's lane. A job without a key, or of a topic without a
-- key limit, always may (and costs nothing here).
local function key_admits(id, j, seq)
    local key = j.key
    if not key then return true end
    local pol = policy_of(j.topic)
    local limit, rate = pol.key_concurrency, pol.key_rate
    if not limit and not rate then return true end
    local topic = j.topic
    local ck = Key.key_count(topic)
    local inflight = limit and tonumber(redis.call('HGET', ck, key) or '0')
    seq = tonumber(seq)
    if limit and inflight >= limit then
        lane_add(id, j, seq)
        return false
    end
    -- Room, but older jobs of the key wait in its lane (the limit was
    -- raised, lanes are draining, a token came): the oldest goes first.
    local head = redis.call('ZRANGE', Key.lane(topic, key), '0', '0', 'WITHSCORES')
    if head[2] and tonumber(head[2]) < seq then
        lane_add(id, j, seq)
        -- (unless the lane waits for a token: the oldest is let go then)
        if not (rate and redis.call('ZSCORE', Key.rate_lanes(), topic_key(topic, key))) then
            lane_release(topic, key, 1)
        end
        return false
    end
    if rate then
        local taken, wait = take_tokens(Key.key_tokens(topic, key), rate, pol.key_period_ms or 1000, 1,
            clock())
        if taken == 0 then
            lane_add(id, j, seq)
            rate_lane_wait(topic, key, clock() + wait)
            return false
        end
        -- A token may be left for the key's next job in its lane: it goes
        -- back to the queue (where the next token decides it).
        if head[2] and (not limit or inflight + 1 < limit) then lane_release(topic, key, 1) end
    end
    if limit then
        redis.call('HINCRBY', ck, key, '1')
        redis.call('HSET', Key.key_owner(topic), id, num(seq) .. ':' .. key)
    end
    return true
end

-- Job `id` of `topic` leaves reserved (finished, deleted, buried, released,
-- failed, given back, its TTR expired). If key_admits counted it, its key
-- is uncounted and, unless to_ready (the job itself goes back to ready, at
-- the place this returns, and takes the room it frees), the oldest job of
-- the key's lane goes back to the queue while the key has room. Returns
-- the job's place in the due order (its sequence number when taken), or
-- nil when it was not counted or the place is unknown.
local function key_reservation_ends(id, topic, to_ready)
    -- Only key_concurrency counts (a removed one takes its counts along),
    -- and every call that ends a reservation reads the policy anyway.
    local limit = policy_of(topic).key_concurrency
    if not limit then return nil end
    local ok = Key.key_owner(topic)
    local v = redis.call('HGET', ok, id)
    if not v then return nil end
    redis.call('HDEL', ok, id)
    local seq, key = string.match(v, '^(%d+):(.*)$')
    local ck = Key.key_count(topic)
    local inflight = redis.call('HINCRBY', ck, key, '-1')
    if inflight <= 0 then redis.call('HDEL', ck, key) end
    if not to_ready and inflight < limit then lane_release(topic, key, 1) end
    seq = tonumber(seq)
    return seq > 0 and seq or nil
end

-- A ready job of `key` left its topic's queue other than by a pop
-- (finished, deleted, purged, rescheduled, replaced). It may have held the
-- key's turn: let go from the lane when a reservation ended, it was to
-- take the room, and no pop of it will now release the next. So the
-- oldest job of the key's lane goes back to the queue while the key has
-- room and no token is awaited (the timer lets that one go); a pop sorts
-- it again under the limits.
local function key_turn_passes(topic, key)
    local lk = Key.lane(topic, key)
    if redis.call('EXISTS', lk) == 0 then return end
    local pol = policy_of(topic)
    local limit = pol.key_concurrency
    if limit and tonumber(redis.call('HGET', Key.key_count(topic), key) or '0') >= limit then return end
    if pol.key_rate and redis.call('ZSCORE', Key.rate_lanes(), topic_key(topic, key)) then return end
    lane_release(topic, key, 1)
end

-- Takes a job out of its topic's ready or buried set, whichever holds it
-- (or its key's lane); j: as load_job answered it, in its current state,
-- or in the state it is leaving when given (state).
local function unlist(id, j, state)
    local topic, push = j.topic, j.push
    state = state or j.state
    if state == 'ready' then
        if lane_remove(id, j) then return end
        if push then
            redis.call('ZREM', Key.push(), id)
            redis.call('ZREM', Key.push_index(topic), id)
            redis.call('ZREM', Key.hold(topic), id) -- held while its topic is paused
        else
            redis.call('ZREM', Key.ready(topic), id)
        end
        if keys_on() then
            if j.head_only then j = load_job(id) end -- the key is among the fields some jobs have
            if j.key then key_turn_passes(topic, j.key) end
        end
    elseif state == 'buried' then
        redis.call('ZREM', Key.buried(topic), id)
    end
end

-- Counts the keys of a topic's reserved jobs (its index P:w) into P:kc and
-- P:ko, when a key limit is set on a topic that had none: so jobs already
-- in flight count against it at once. Their place is unknown (0).
local function key_count_reserved(topic)
    local ck, ok = Key.key_count(topic), Key.key_owner(topic)
    redis.call('DEL', ck, ok)
    for _, id in ipairs(redis.call('ZRANGE', Key.reserved_index(topic), '0', '-1')) do
        local j = load_job(id)
        if j and j.key then
            redis.call('HINCRBY', ck, j.key, '1')
            redis.call('HSET', ok, id, '0:' .. j.key)
        end
    end
end

-- policy.lua changed a topic's policy from `old` to `new`. key_concurrency
-- set: the jobs in flight are counted; removed: the counts go. Any other
-- change of the key limits but a lowered key_concurrency: the lanes go
-- back to their queue (LANE_STEP jobs now, the rest by lanes_drain_step),
-- where pops sort them again under the new limits.
local function key_limit_changed(topic, old, new)
    local kc, rate = new.key_concurrency, new.key_rate
    if old.key_concurrency == kc and old.key_rate == rate and old.key_period_ms == new.key_period_ms then
        return
    end
    if kc or rate then
        redis.call('SADD', Key.key_limited(), topic)
        keys_cache = true
    end
    if kc and not old.key_concurrency then key_count_reserved(topic) end
    if not kc then redis.call('DEL', Key.key_count(topic), Key.key_owner(topic)) end
    local lowered = kc and old.key_concurrency and kc < old.key_concurrency and
        old.key_rate == rate and old.key_period_ms == new.key_period_ms
    local had = old.key_concurrency or old.key_rate
    if had and not lowered then
        redis.call('SADD', Key.lanes_drain(), topic)
        redis.call('HSET', Key.policy(topic), LANES_DRAINING, '1') -- its pops drain too
        lanes_drain(topic, LANE_STEP)
    end
end

-- Tells a topic's waiting long-polls that n of its jobs may be taken: the
-- ready message flush() describes. Its id is a sequence number this call
-- took (one it reserved anyway, else one more), the message's place among
-- the call's and Redis' time: two calls never share an id, even two
-- finishes of one topic in one millisecond (a head's sequence number, the
-- id before, repeats then, and the second message woke nobody).
local function publish_ready(topic, n)
    if not wake_ids.seq then reserve_seq(1) end
    wake_ids.n = wake_ids.n + 1
    redis.call('SPUBLISH', P .. ':ready', num(n) .. ':' .. topic .. '\0' .. num(wake_ids.seq) .. '.' ..
        num(wake_ids.n) .. '@' .. num(clock()))
end

