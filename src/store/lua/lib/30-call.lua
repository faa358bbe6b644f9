-- lib/30-call.lua: a call's frame: begin, Redis' clock, paused topics, the caller's topics, counters.

local function begin(keys)
    P = keys[1]
    counters, topic_order = {}, {}
    zadds, zadd_order = {}, {}
    ready_topics, ready_order = {}, {}
    bucket_heads, delay_listed, topic_buckets = {}, {}, {}
    push_ready = 0
    wake_ids = {n = 0}
    allow_prefixes = nil
    paused_cache = {}
    policy_cache = {}
    purging_cache = {}
    call_now = nil
    history_cache = nil
    keys_cache = nil
    horizon_cache = nil
end

-- Redis' time, read once per call (a call is atomic: one instant).
local function clock()
    if not call_now then call_now = now_ms() end
    return call_now
end

-- Is the topic paused? pop takes nothing from it and push_take holds its
-- push jobs back; due jobs still become ready.
local function paused(topic)
    local v = paused_cache[topic]
    if v == nil then
        v = redis.call('SISMEMBER', Key.paused(), topic) == 1
        paused_cache[topic] = v
    end
    return v
end

-- While a Redis Cluster moves this shard's hash slot to another node, some
-- of the shard's keys are on each side: no call could see the whole shard,
-- so none runs (the caller retries, then answers 503). Two absent keys of
-- the slot tell: EXISTS of them fails exactly then (an ASK redirection on
-- the node giving the slot away, TRYAGAIN on the one taking it), and
-- answers 0 otherwise, or without a cluster.
local function slot_moving()
    local r = redis.pcall('EXISTS', P .. ':absent:1', P .. ':absent:2')
    return type(r) == 'table' and r.err ~= nil
end

-- The caller's token's topic prefixes, comma-separated ('' for a token
-- without a topic limit, or when auth is off), for allowed().
local function limit_topics(allow)
    if allow ~= '' then
        allow_prefixes = {}
        for p in string.gmatch(allow, '[^,]+') do allow_prefixes[#allow_prefixes + 1] = p end
    end
end

-- May the caller's token act on a job of this topic? Checked inside the
-- same call that acts, so no other client can change the answer between
-- the check and the action.
local function allowed(topic)
    if not allow_prefixes then return true end
    for _, p in ipairs(allow_prefixes) do
        if string.sub(topic, 1, #p) == p then return true end
    end
    return false
end

local function count(topic, field, by)
    local c = list_for(counters, topic_order, topic)
    c[field] = (c[field] or 0) + by
end

-- n jobs (default 1) of topic went from state `from` to `to`.
local function move_count(topic, from, to, n)
    count(topic, from, -(n or 1))
    count(topic, to, n or 1)
end

