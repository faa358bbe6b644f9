-- lib/20-keys.lua: key names, and reading sets page by page.

function Key.bucket(k) return P .. ':b:' .. k end
function Key.ready(topic) return P .. ':r:' .. topic end
function Key.buried(topic) return P .. ':x:' .. topic end
function Key.stats(topic) return P .. ':s:' .. topic end
-- Ready push jobs of every topic, scored by sequence like a ready set.
function Key.push() return P .. ':push' end
-- Bucket k's delay sets (delay_set_name: 'd:<topic>', 'dc:<topic>'),
-- scored by their earliest due time, or earlier: a removal leaves the score
-- as it was, and the move that finds nothing due sets it right.
function Key.bucket_sets(k) return P .. ':bt:' .. k end
-- Per-topic indexes, so `jobs` pages a topic's jobs of one state without
-- reading the buckets (which hold every topic): reserved jobs by TTR
-- deadline, ready push jobs (which wait in P:push) by their sequence
-- number. Each is changed wherever the job's bucket entry or P:push entry
-- is. (A topic's delayed jobs need none: their delay sets are per topic.)
function Key.reserved_index(topic) return P .. ':w:' .. topic end
function Key.push_index(topic) return P .. ':q:' .. topic end
-- A topic's ready jobs set aside in their key's lane (see lane_remove).
function Key.lanes_index(topic) return P .. ':kr:' .. topic end
-- A kept record of a finished or deleted job, and the indexes of a
-- topic's records of each outcome (see "Kept history" below).
function Key.record(id) return P .. ':h:' .. id end
-- A push job's delivery log (see "Delivery log" below).
function Key.delivery(id) return P .. ':dl:' .. id end
function Key.history_index(topic, outcome)
    return P .. (outcome == 'finished' and ':hf:' or ':hd:') .. topic
end
-- The sets that list a topic's jobs of a state (a name `jobs` and `purge`
-- take), in the state's order: delay by due time, reserved by TTR
-- deadline, ready by sequence (the ready set merged with the ready push
-- jobs, whose scores share the shard's sequence, and the jobs set aside in
-- their key's lane), buried by sequence;
-- and (`jobs` only) the records of finished and deleted jobs, newest first.
local function state_sets(topic, state)
    if state == 'finished' or state == 'deleted' then return {Key.history_index(topic, state)} end
    if state == 'delay' then return {Key.delay(topic, false), Key.delay(topic, true)} end
    if state == 'reserved' then return {Key.reserved_index(topic)} end
    if state == 'ready' then return {Key.ready(topic), Key.push_index(topic), Key.lanes_index(topic)} end
    return {Key.buried(topic)}
end

-- a <= b in byte order (Lua's own comparison follows the locale).
local function bytes_le(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return #a <= #b
end

-- Up to `want` members of each of the sorted sets `keys` after a position,
-- merged into one list of {id, score} in (score, id) order; their first
-- `want` are the first `want` of the union. The position is a (score, id)
-- pair ('' score: from the start): members with a higher score, or the
-- same score and a greater id (byte order, as a sorted set orders equal
-- scores). It is found by rank in O(log^2 n): two ZCOUNTs give the ranks
-- that hold the position's score, a binary search by id among them the
-- first rank after it. So a page costs the same whatever the set's size,
-- also when thousands of members share a score, and stays right when the
-- member at the position has gone since.
local function entries_after(keys, after_score, after_id, want)
    local entries = {}
    for _, key in ipairs(keys) do
        local start = 0
        if after_score ~= '' then
            local lo = redis.call('ZCOUNT', key, '-inf', '(' .. after_score)
            local hi = lo + redis.call('ZCOUNT', key, after_score, after_score)
            while lo < hi do
                local mid = math.floor((lo + hi) / 2)
                local x = redis.call('ZRANGE', key, mid, mid)[1]
                if bytes_le(x, after_id) then lo = mid + 1 else hi = mid end
            end
            start = lo
        end
        local m = redis.call('ZRANGE', key, num(start), num(start + want - 1), 'WITHSCORES')
        for i = 1, #m, 2 do entries[#entries + 1] = {m[i], tonumber(m[i + 1])} end
    end
    if #keys > 1 then
        table.sort(entries, function(a, b)
            if a[2] ~= b[2] then return a[2] < b[2] end
            return a[1] ~= b[1] and bytes_le(a[1], b[1])
        end)
    end
    return entries
end

-- Paused topics (a set, the same in every shard: pause/resume write all).
function Key.paused() return P .. ':paused' end
-- Push jobs of a paused topic that push_take met, with their P:push score,
-- until resume puts them back: so paused jobs never block the others.
function Key.hold(topic) return P .. ':ph:' .. topic end

-- Moves up to n of a topic's oldest held push jobs back to P:push with
-- their scores (so the next ZPOPMIN meets them first); returns how many.
local function unhold_oldest(topic, n)
    if n <= 0 then return 0 end
    local hk = Key.hold(topic)
    local held = redis.call('ZRANGE', hk, '0', num(n - 1), 'WITHSCORES')
    if #held == 0 then return 0 end
    local args = {}
    for i = 1, #held, 2 do
        args[#args + 1] = held[i + 1]
        args[#args + 1] = held[i]
    end
    redis.call('ZADD', Key.push(), unpack(args))
    redis.call('ZREMRANGEBYRANK', hk, '0', num(#held / 2 - 1))
    return #held / 2
end

