-- common.lua: helpers prepended to every delayq script (src/lua/embed.sh).
-- ARGV[1] is always the key prefix with its hash tag, e.g. "{dq}": every key
-- of a deployment shares that tag, so each script touches one hash slot.
-- Job hash fields: t topic, ttr (ms), n deliveries so far, r retries (-1
-- unlimited), kb deliveries at the last kick, c created (ms), s state, d due
-- (ms, while delay or reserved), k bucket, g list generation. The body is a
-- string key of its own (P:v:<id>): inside the hash, a body over 64 bytes
-- would turn Redis' compact listpack encoding into a hash table, tripling the
-- memory a job costs.
local P = ARGV[1]
local TEN_YEARS_MS = 3652 * 86400 * 1000

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(x)
    return string.format('%d', x)
end

local function job_key(id) return P .. ':j:' .. id end
local function body_key(id) return P .. ':v:' .. id end
local function bucket_key(k) return P .. ':b:' .. k end
local function ready_key(topic) return P .. ':r:' .. topic end
local function buried_key(topic) return P .. ':x:' .. topic end
local function stats_key(topic) return P .. ':s:' .. topic end

-- Counters and list appends are gathered during a script and written once
-- per topic by flush(), so moving a thousand jobs costs a handful of
-- commands beyond the per-job reads and writes. Every script that changes
-- state ends with flush().
local counters = {}   -- topic -> {field -> delta}
local appends = {}    -- list key -> {entries...}, in order
local append_order = {}
local ready_topics = {} -- topic -> jobs made ready in this call

local function count(topic, field, by)
    local c = counters[topic]
    if not c then
        c = {}
        counters[topic] = c
    end
    c[field] = (c[field] or 0) + by
end

local function move_count(topic, from, to)
    count(topic, from, -1)
    count(topic, to, 1)
end

local function append(key, entry)
    local list = appends[key]
    if not list then
        list = {}
        appends[key] = list
        append_order[#append_order + 1] = key
    end
    list[#list + 1] = entry
end

-- A list entry is "<generation>:<id>". The generation changes every time the
-- job enters a list, so an entry left behind by finish/delete (lists are not
-- searched, to keep finish O(1)) or by an earlier state is recognised as
-- stale and skipped. One INCR per script call; jobs of the same call get
-- "<call>.<n>".
local call_seq
local call_n = 0
local function next_generation()
    if not call_seq then
        call_seq = num(redis.call('INCR', P .. ':seq'))
    end
    call_n = call_n + 1
    return call_seq .. '.' .. call_n
end

local function split_entry(e)
    local sep = string.find(e, ':', 1, true)
    return string.sub(e, 1, sep - 1), string.sub(e, sep + 1)
end

-- Queues a job on its topic's ready list under a new generation, which the
-- caller writes into the job hash with s=ready.
local function enqueue_ready(id, topic)
    local g = next_generation()
    append(ready_key(topic), g .. ':' .. id)
    ready_topics[topic] = (ready_topics[topic] or 0) + 1
    return g
end

-- Makes an existing job ready.
local function make_ready(id, topic)
    redis.call('HSET', job_key(id), 's', 'ready', 'g', enqueue_ready(id, topic), 'd', '-1')
end

-- Sets a job aside; pop never sees it, kick brings it back.
local function bury(id, topic)
    local g = next_generation()
    redis.call('HSET', job_key(id), 's', 'buried', 'g', g, 'd', '-1')
    append(buried_key(topic), g .. ':' .. id)
    count(topic, 'buries', 1)
end

-- Writes the gathered list appends and counters, then tells waiting
-- long-polls how many jobs each topic got ("<count>:<topic>", once per topic
-- per call; each worker process wakes that many of its waiters).
-- Numbers go to redis.call as strings: Redis formats a Lua number with
-- %.17g, which costs more than the command it is an argument of.
local function flush()
    for _, key in ipairs(append_order) do
        local list = appends[key]
        for i = 1, #list, 1000 do -- unpack() has a stack limit
            redis.call('RPUSH', key, unpack(list, i, math.min(i + 999, #list)))
        end
    end
    for topic, c in pairs(counters) do
        for field, by in pairs(c) do
            if by ~= 0 then
                redis.call('HINCRBY', stats_key(topic), field, num(by))
            end
        end
    end
    for topic, n in pairs(ready_topics) do
        redis.call('PUBLISH', P .. ':ready', num(n) .. ':' .. topic)
    end
end

-- Puts a job in its bucket at `due`. When it becomes the bucket's earliest
-- entry, timers are told, since they sleep until the earliest one. A
-- bucket's head is read once per call: jobs scheduled by one call (a batch
-- add, a pop of many) compare against what the call already wrote.
local bucket_heads = {} -- bucket key -> earliest due known (false: empty)
local function schedule(id, k, due)
    local bk = bucket_key(k)
    local head = bucket_heads[bk]
    if head == nil then
        local first = redis.call('ZRANGE', bk, 0, 0, 'WITHSCORES')
        head = first[2] and tonumber(first[2]) or false
    end
    redis.call('ZADD', bk, num(due), id)
    if not head or due < head then
        redis.call('PUBLISH', P .. ':wake', k .. ':' .. num(due))
        head = due
    end
    bucket_heads[bk] = head
end

-- True when a reserved job has used every delivery its retries allow.
local function retries_spent(n, r, kb)
    r = tonumber(r)
    return r >= 0 and tonumber(n) - tonumber(kb) >= r + 1
end

-- Every process of a deployment must split jobs into the same number of
-- buckets, or jobs would land in buckets no timer scans. The first process
-- records its number; a process configured differently is refused.
local function buckets_match(nb)
    local known = redis.call('GET', P .. ':buckets')
    if not known then
        redis.call('SET', P .. ':buckets', nb)
        return true
    end
    return tonumber(known) == tonumber(nb)
end
