-- jobs: one page of a topic's jobs in one state, in the order of the set
-- that holds them: delay by due time (P:d:<topic>), reserved by TTR
-- deadline (P:w:<topic>), ready by sequence (P:r:<topic> merged with the
-- topic's ready push jobs, P:q:<topic>), buried by sequence (P:x:<topic>).
-- The position after which the page starts is a (score, id) pair: members
-- with a higher score, or the same score and a greater id (byte order, as
-- a sorted set orders equal scores). It is found by rank in O(log^2 n), so
-- a page costs the same whatever the set's size, and stays right when the
-- job at the position has gone since.
-- flags: no-writes
-- KEYS: P.
-- argv: topic state limit after_score after_id
-- after_score is '' from the start.
-- reply: more
-- reply entry: id score view
-- more is 1 when jobs follow the page, else 0; an `entry` per job follows
-- it, view being its job_view.
local topic, state, limit = ARGV[ARG.topic], ARGV[ARG.state], tonumber(ARGV[ARG.limit])
local after_score, after_id = ARGV[ARG.after_score], ARGV[ARG.after_id]

-- a <= b in byte order (Lua's own comparison follows the locale).
local function bytes_le(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return #a <= #b
end

-- Up to `want` members of key after the position, with their scores.
local function page(key, want)
    local start = 0
    if after_score ~= '' then
        local lo = redis.call('ZCOUNT', key, '-inf', '(' .. after_score)
        local hi = lo + redis.call('ZCOUNT', key, after_score, after_score)
        -- ranks lo..hi-1 hold the cursor's score, by id: skip those <= it
        while lo < hi do
            local mid = math.floor((lo + hi) / 2)
            local x = redis.call('ZRANGE', key, mid, mid)[1]
            if bytes_le(x, after_id) then lo = mid + 1 else hi = mid end
        end
        start = lo
    end
    return redis.call('ZRANGE', key, num(start), num(start + want - 1), 'WITHSCORES')
end

local keys
if state == 'delay' then keys = {delay_index(topic)}
elseif state == 'reserved' then keys = {reserved_index(topic)}
elseif state == 'ready' then keys = {ready_key(topic), push_index(topic)}
else keys = {buried_key(topic)} end

-- limit + 1 from each set: the first limit of their union are the page,
-- and one more tells that jobs follow.
local entries = {}
for _, key in ipairs(keys) do
    local m = page(key, limit + 1)
    for i = 1, #m, 2 do entries[#entries + 1] = {m[i], tonumber(m[i + 1])} end
end
if #keys > 1 then
    table.sort(entries, function(a, b)
        if a[2] ~= b[2] then return a[2] < b[2] end
        return a[1] ~= b[1] and bytes_le(a[1], b[1])
    end)
end
local out = reply{more = #entries > limit and 1 or 0}
for i = 1, math.min(limit, #entries) do
    local id = entries[i][1]
    local view = job_view(id)
    if view then -- every member names a job of that state (kept with it)
        reply_entry({id = id, score = num(entries[i][2]), view = view}, out)
    end
end
return out
