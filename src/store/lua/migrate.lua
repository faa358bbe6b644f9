-- migrate: one bounded step of converting a shard's data of an older
-- layout into LAYOUT (docs/OPERATIONS.md, "Upgrading without losing
-- jobs"); `delayq-fcgi --migrate` calls it until it answers done. Every
-- step is atomic and leaves its progress in Redis, so a migration stopped
-- anywhere goes on where it was when run again. No other function runs on
-- the shard meanwhile (they answer DQ_LAYOUT_OLD), and no process of the
-- older release may run either: it would write the old structures again.
-- flags: any-layout
-- KEYS: P.
-- argv: limit:int
-- reply: done left
-- limit is the most list entries or jobs a step reads. done is 1 once the
-- shard is at LAYOUT (recorded in P:layout), left then 'done'; else 0, and
-- left says what is left.
-- Error: DQ_LAYOUT_NEW <found> <known> when the data is newer than LAYOUT.
--
-- From layout 1: P:topics was a set, a topic's ready (P:r) and buried (P:x)
-- queues lists of '<generation>:<id>' entries (stale ones left behind by
-- finish and delete), the per-topic counters had no 'jobs', and there were
-- no totals and no idle topics. The set is renamed to P:migrate:topics,
-- the topics still to convert; each topic's lists are renamed to
-- P:migrate:r:<topic> and :x:, and their live entries move to the sorted
-- sets in list order, `limit` at a time; a topic whose lists are done gets
-- its 'jobs' gauge, joins P:topics (and P:idle when empty) and adds its
-- figures to P:totals, in the step that takes it out of the pending set.
-- From layouts 1-8: every bucket and P:push are walked by rank, the
-- position kept in P:migrate:at: a delayed job leaves its bucket for its
-- topic's delay set (P:d, or P:dc for a callback, which layouts 6-8 kept
-- in P:d beside its bucket entry), listed in its topic's bucket's P:bt; a
-- reserved job stays and gets its entry in its topic's reserved index
-- (P:w), a ready push job in P:q (layouts 1-5 had neither); bucket
-- entries of jobs that no longer exist are dropped on the way. Jobs are
-- read as stored (read_job): what load_job makes of a head that says
-- delay holds only once the walk is done.
local call = args()
local limit = math.max(1, call.limit)
local pending = P .. ':migrate:topics'
local at_key = P .. ':migrate:at'
local GAUGE = {delay = true, ready = true, reserved = true, buried = true}

local v = stored_layout()
if v and v > LAYOUT then return redis.error_reply('DQ_LAYOUT_NEW ' .. num(v) .. ' ' .. num(LAYOUT)) end
-- Recorded before the first write, read by every process (stored_layout):
-- the steps below make the data look newer than it is, partway.
if v and v < LAYOUT then redis.call('SET', Key.migrating(), num(v)) end

-- Moves up to `budget` entries of list `from` to the sorted set `to`,
-- those whose job is still in `state` with that generation, in order.
local function convert_entries(from, to, state, budget)
    local entries = redis.call('LRANGE', from, '0', num(budget - 1))
    if #entries == 0 then return 0 end
    redis.call('LTRIM', from, num(#entries), '-1')
    local seq = reserve_seq(#entries)
    for i, e in ipairs(entries) do
        local sep = string.find(e, ':', 1, true)
        local id = sep and string.sub(e, sep + 1)
        local h = id and redis.pcall('HMGET', Key.job(id), 's', 'g')
        if h and h[1] == state and h[2] == string.sub(e, 1, sep - 1) then
            zadd(to, num(seq + i - 1), id)
        end
    end
    return #entries
end

-- A converted topic's counters: its 'jobs' gauge, its share of the
-- totals, and its entries in P:topics and P:idle.
local function finish_topic(topic)
    local sk = Key.stats(topic)
    local fields = redis.call('HGETALL', sk)
    local jobs = 0
    for i = 1, #fields, 2 do
        local field, by = fields[i], tonumber(fields[i + 1])
        if GAUGE[field] then jobs = jobs + by end
        if field ~= 'jobs' and by ~= 0 then redis.call('HINCRBY', P .. ':totals', field, num(by)) end
    end
    redis.call('HSET', sk, 'jobs', num(jobs))
    redis.call('ZADD', P .. ':topics', '0', topic)
    if jobs == 0 then redis.call('ZADD', P .. ':idle', num(now_ms()), topic) end
    redis.call('SREM', pending, topic)
end

-- Converts the lists of one pending topic, `limit` entries at most.
local function convert_topic(topic)
    local budget = limit
    for _, q in ipairs({{Key.ready(topic), 'r', 'ready'}, {Key.buried(topic), 'x', 'buried'}}) do
        local old = P .. ':migrate:' .. q[2] .. ':' .. topic
        if redis.call('TYPE', q[1]).ok == 'list' then redis.call('RENAME', q[1], old) end
        budget = budget - convert_entries(old, q[1], q[3], budget)
        if budget <= 0 then return end
    end
    finish_topic(topic)
end

-- Walks up to `limit` entries of `key` from rank `from`: place(id, j,
-- score) for each whose job exists (j read as stored), which answers true
-- when it took the entry out of `key`. Returns the rank after them, or nil
-- when the walk went past the end.
local function walk_entries(key, from, place)
    local entries = redis.call('ZRANGE', key, num(from), num(from + limit - 1), 'WITHSCORES')
    local rank = from
    for i = 1, #entries, 2 do
        local id, score = entries[i], entries[i + 1]
        local j = read_job(id, true)
        if not j then
            redis.call('ZREM', key, id) -- its job is gone
        elseif not place(id, j, score) then
            rank = rank + 1
        end
    end
    if #entries < 2 * limit then return nil end
    return rank
end

-- A bucket entry in this layout: a delayed job's goes to its delay set.
local function place_bucket_entry(bk)
    return function(id, j, score)
        if j.state == 'delay' then
            redis.call('ZREM', bk, id)
            -- (layouts 6-8 listed callbacks in the other delay set's key)
            if j.push then redis.call('ZREM', Key.delay(j.topic, false), id) end
            due_set_add(id, j, tonumber(score), 'delay', true)
            return true
        end
        if j.state == 'reserved' then zadd(Key.reserved_index(j.topic), score, id) end
        return false
    end
end

local function place_push_entry(id, j, score)
    zadd(Key.push_index(j.topic), score, id)
    return false
end

if redis.call('TYPE', P .. ':topics').ok == 'set' then -- layout 1's set, not yet renamed
    redis.call('RENAME', P .. ':topics', pending)
    return reply{done = 0, left = 'topics: ' .. num(redis.call('SCARD', pending)) .. ' to convert'}
end
if redis.call('EXISTS', pending) == 1 then
    convert_topic(redis.call('SRANDMEMBER', pending))
    return reply{done = 0, left = 'topics: ' .. num(redis.call('SCARD', pending)) .. ' to convert'}
end
-- (An older release's migration, stopped in its walk, left no
-- Key.migrating(): its P:migrate:at says it began.)
if (v and v < LAYOUT) or redis.call('EXISTS', at_key) == 1 then
    local nb = tonumber(redis.call('GET', P .. ':buckets'))
    local at = redis.call('HMGET', at_key, 'b', 'r')
    local b, r = tonumber(at[1] or '0'), tonumber(at[2] or '0')
    if b < nb then
        r = walk_entries(Key.bucket(b), r, place_bucket_entry(Key.bucket(b)))
        if not r then b, r = b + 1, 0 end
        redis.call('HSET', at_key, 'b', num(b), 'r', num(r))
        return reply{done = 0, left = 'buckets: bucket ' .. num(b) .. ' of ' .. num(nb)}
    end
    r = walk_entries(Key.push(), r, place_push_entry)
    if r then
        redis.call('HSET', at_key, 'r', num(r))
        return reply{done = 0, left = 'ready push jobs: from ' .. num(r)}
    end
end
redis.call('DEL', at_key, Key.migrating())
redis.call('SET', Key.layout(), num(LAYOUT))
return reply{done = 1, left = 'done'}
