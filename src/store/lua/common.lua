-- common.lua: what every delayq function shares: key names, Redis' clock,
-- the per-topic counters, and the per-call bookkeeping that flush() writes
-- once at the end of a call.
--
-- src/store/lua/embed.sh builds one Redis Functions library from this file and
-- the other .lua files: each of them becomes the body of a function that
-- runs begin(KEYS) first and flush() after it, whatever it returns,
-- so neither can be forgotten. The per-call tables below are made anew by
-- begin(): the library's Lua state lives as long as Redis keeps it loaded,
-- so anything left in them would leak into the next call.
--
-- KEYS[1] is the key prefix of one shard with its hash tag: "{dq}" when the
-- deployment has one shard, "{dq:3}" for shard 3 of several. Every key a
-- function touches is derived from it, so each call stays in one hash slot,
-- and so do the messages it publishes (sharded pub/sub, SPUBLISH), which
-- Redis Cluster keeps on the node that owns the slot.
-- A job is one string key, P:j:<id> (docs/DESIGN.md, "Redis layout"): a
-- fixed-width head, its topic, the fields only some jobs have, then the
-- body's bytes. The head (struct format HEAD): s state (1 delay, 2 ready,
-- 3 reserved, 4 buried), d due (ms, while delay or reserved, else -1), rt
-- when it last became ready (ms; -1 before it first did, or on jobs made
-- before rt existed: c stands in), n deliveries so far, kb deliveries at
-- the last kick, r retries (-1 unlimited), ttr (ms), c created (ms), k
-- bucket, more (0: no more fields; 1: more; 3: more, and one is a callback
-- URL), the topic's length. The head's first five fields are all that a
-- change of state writes, in place (SETRANGE), so pop and the rest never
-- copy the body back; the timer's move writes no head at all: a head that
-- says delay is ready once its job has left its topic's delay set
-- (settle_state). Then the topic; then, when more > 0, MessagePack (store_job)
-- of bo backoff steps (ms, comma-separated), u callback URL (a push job:
-- delayq-push delivers it, pop never sees it), to its timeout (ms), la/ls/le
-- the last push attempt's time (ms), HTTP status and error (false where
-- unset), g the grouping key, tp and ts the W3C trace context (traceparent,
-- tracestate), du the due time it was added (or rescheduled) with and fd
-- its first delivery (ms; both only in a topic that keeps history, for
-- its record); then the body. One key per job costs about 150 bytes less than
-- the hash and body key that earlier versions wrote (a body over 64 bytes
-- inside a hash would turn its compact encoding into a hash table); a job
-- of that older layout is read as it is and written in this one the first
-- time a function changes it.
--
-- Errors go back to C in one style: redis.error_reply('DQ_<CODE> <detail>')
-- for the whole call, and the same words as the items of a batch reply
-- ('ok', 'DQ_CONFLICT <state>', 'DQ_NOT_FOUND'); src/store/store_errors.c maps them.
--
-- What C and Lua share is declared once: each function's arguments and
-- reply fields in its header ("-- argv: ...", "-- reply: ..."), records
-- several functions answer here (job_view), and the constants in
-- src/job/job.h (TOPIC_MAX, FIRE_SEP); embed.sh makes both sides' names
-- from them.

local P

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Numbers go to redis.call as strings: Redis formats a Lua number with
-- %.17g, which costs more than the command it is an argument of.
local function num(x)
    return string.format('%d', x)
end

local function job_key(id) return P .. ':j:' .. id end
-- The body key of a job of the older layout (a hash at P:j:<id>).
local function legacy_body_key(id) return P .. ':v:' .. id end

-- A topic's delayed jobs, scored by due time (ms): P:d:<topic>, and
-- P:dc:<topic> for those with a callback URL, so the move knows where each
-- goes without reading it. The set is the only record that a job is still
-- delayed: the move does not touch the job (see load_job).
local function delay_set_name(topic, push) return (push and 'dc:' or 'd:') .. topic end
-- The topic and kind of a delay set by its name: topic, push.
local function delay_set_of(name)
    local push = string.sub(name, 1, 3) == 'dc:'
    return string.sub(name, push and 4 or 3), push
end
local function delay_key(topic, push) return P .. ':' .. delay_set_name(topic, push) end

local HEAD = '<Bi8i8I4I4i4I4i8I2BB'
local STATE_HEAD = '<Bi8i8I4I4' -- the head's first five fields
-- struct.size(HEAD), taken on first use: the struct library cannot be
-- reached while Redis loads the library.
local HEAD_BYTES
local STATE_CODE = {delay = 1, ready = 2, reserved = 3, buried = 4}
local STATE_NAME = {'delay', 'ready', 'reserved', 'buried'}
-- New fields go at the end: a job written before one reads as one without
-- it, an older library reading a job that has it sees the fields it knows,
-- and a job without the last ones stores none of them (store_job stops at
-- the last it has). g, the grouping key, came after the callback fields;
-- tp and ts, the trace context, after g; du and fd, the times a kept
-- record needs, after them.
local MORE_FIELDS = {'bo', 'u', 'to', 'la', 'ls', 'le', 'g', 'tp', 'ts', 'du', 'fd'}
-- The fields an older-layout hash holds as decimal text.
local NUMERIC_FIELD = {ttr = true, n = true, r = true, kb = true, c = true, k = true, d = true, rt = true,
    to = true, la = true}

-- A job of the older layout: its hash and body key, as load_job answers.
local function load_legacy_job(id)
    local h = redis.call('HGETALL', job_key(id))
    if #h == 0 then return nil end
    local j = {whole = true} -- its next write is the whole key, in this layout
    for i = 1, #h, 2 do
        local f, x = h[i], h[i + 1]
        if NUMERIC_FIELD[f] then x = tonumber(x) end
        j[f] = x
    end
    j.push = j.u ~= nil
    j.legacy = true
    j.body = redis.call('GET', legacy_body_key(id)) or ''
    return j
end

-- redis.call(cmd, key, list...), split into calls of 2000 arguments
-- (unpack() has a stack limit); list's length is even for ZADD's pairs.
local function call_in_chunks(cmd, key, list)
    for i = 1, #list, 2000 do
        redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
    end
end

-- Per-call state, reset by begin().
local counters      -- topic -> {field -> delta}
local topic_order   -- topics in the order first counted (deterministic writes)
local zadds         -- sorted-set key -> {score, member, score, member, ...}
local zadd_order
local ready_topics  -- topic -> jobs made ready in this call
local ready_order
local bucket_heads  -- bucket -> earliest due known (false: empty)
local delay_listed  -- delay set name -> the lowest P:bt score this call gave it
local topic_buckets -- topic -> topic_bucket(topic), worked out once per call
local push_ready    -- push jobs made ready in this call
local wake_ids      -- seq: a sequence number this call took (unique to it); n: messages sent
local allow_prefixes -- nil: every topic; else the token's topic prefixes
local paused_cache  -- topic -> paused (read once per call)
local policy_cache  -- topic -> its policy in this shard (read once per call)
local purging_cache -- topic -> when its latest purge began here (false: none; once per call)
local call_now      -- Redis' time, read once per call by clock()
local history_cache -- does P:history exist (nil: not read yet in this call)
local keys_cache    -- does P:klim exist (nil: not read yet in this call)
local horizon_cache -- the shard's wake-up horizon (nil: not read yet in this call)

-- lists[key], a list made on first use, whose key then joins order (so
-- the writes gathered per key happen in a deterministic order).
local function list_for(lists, order, key)
    local list = lists[key]
    if not list then
        list = {}
        lists[key] = list
        order[#order + 1] = key
    end
    return list
end

-- Gathers a sorted-set entry for write_zadds; at_once: writes it now.
local function zadd(key, score, member, at_once)
    if at_once then
        redis.call('ZADD', key, score, member)
        return
    end
    local list = list_for(zadds, zadd_order, key)
    list[#list + 1] = score
    list[#list + 1] = member
end

-- Writes the sorted-set entries gathered so far (flush() does, at the end
-- of a call; replace_job before it removes a job's entries, which an
-- earlier job of the same batch may have gathered).
local function write_zadds()
    for _, key in ipairs(zadd_order) do call_in_chunks('ZADD', key, zadds[key]) end
    zadds, zadd_order = {}, {}
end

-- A job whose head says delay but that has left its topic's delay set was
-- made ready by the move, which writes no head: it is ready, and became so
-- at its due time. found_in: the state of the set the caller found it in
-- ('ready', 'delay'), which saves the look at the delay set. (A delay
-- set entry this call gathered is written first: a batch may name an id
-- twice.)
local function settle_state(id, j, found_in)
    if j.s ~= 'delay' or found_in == 'delay' then return j end
    if found_in ~= 'ready' then
        local dk = delay_key(j.t, j.push)
        if zadds[dk] then write_zadds() end
        if redis.call('ZSCORE', dk, id) then return j end
    end
    j.s, j.rt, j.d = 'ready', j.d, -1
    return j
end

-- Job `id` as a table of its fields (nil where it has none; numbers as
-- numbers; push: it has a callback URL), or nil. head_only: read the head
-- and the topic only (for a move, a removal, a conflict check), so the
-- fields only some jobs have (j.more: it has them) and the body are not
-- read. The body is job_body(j), sliced when asked for. value: the job's
-- stored value, read already (false: there is none), so it is not read.
-- Its state is as stored: load_job, below, is what functions call.
local function read_job(id, head_only, value)
    local jk = job_key(id)
    local v = value
    if v == nil and head_only then
        HEAD_BYTES = HEAD_BYTES or struct.size(HEAD)
        v = redis.pcall('GETRANGE', jk, '0', num(HEAD_BYTES + TOPIC_MAX - 1))
    elseif v == nil then
        v = redis.pcall('GET', jk)
    end
    if type(v) == 'table' then return load_legacy_job(id) end -- WRONGTYPE: a hash
    if not v or v == '' then return nil end
    local s, d, rt, n, kb, r, ttr, c, k, more, tlen, at = struct.unpack(HEAD, v)
    local j = {s = STATE_NAME[s], d = d, n = n, kb = kb, r = r, ttr = ttr, c = c, k = k,
        more = more > 0, push = more == 3, raw = v, head_only = head_only and more > 0}
    if rt >= 0 then j.rt = rt end
    j.t = string.sub(v, at, at + tlen - 1)
    at = at + tlen
    if more > 0 and not head_only then
        local next_at, x = cmsgpack.unpack_one(v, at - 1)
        for i, f in ipairs(MORE_FIELDS) do
            if x[i] ~= false then j[f] = x[i] end
        end
        at = next_at < 0 and #v + 1 or next_at + 1
    end
    j.body_at = at
    return j
end

-- read_job's job in the state it is in (found_in: see settle_state).
local function load_job(id, head_only, value, found_in)
    local j = read_job(id, head_only, value)
    return j and settle_state(id, j, found_in)
end

local function job_body(j)
    if not j.body then j.body = string.sub(j.raw, j.body_at) end
    return j.body
end

-- Writes job j (as load_job or create_job made it) back: only its state
-- fields, in place, unless j.whole asks for the whole key (a new job, one
-- of the older layout, or one whose other fields changed).
-- if_new: job j is new, and written only where the id names no job yet
-- (one SET NX GET, so an add reads nothing before it writes); answers nil
-- when it wrote it, else the job there, untouched, as load_job answers it.
local function store_job(id, j, if_new)
    if not j.whole then
        redis.call('SETRANGE', job_key(id), '0', struct.pack(STATE_HEAD, STATE_CODE[j.s], j.d, j.rt or -1, j.n, j.kb))
        return
    end
    -- Only the fields the job has, by number (most jobs have none): cmsgpack
    -- writes them as an array when they are fields 1 to n, else as a map of
    -- their numbers, which costs nothing for the fields a job lacks.
    local last = #MORE_FIELDS
    while last > 0 and j[MORE_FIELDS[last]] == nil do last = last - 1 end
    local more, tail = 0, ''
    if last > 0 then
        local x = {}
        for i = 1, last do x[i] = j[MORE_FIELDS[i]] end
        more = j.u and 3 or 1
        tail = cmsgpack.pack(x)
    end
    local v = struct.pack(HEAD, STATE_CODE[j.s], j.d, j.rt or -1, j.n, j.kb, j.r, j.ttr, j.c, j.k,
        more, #j.t) .. j.t .. tail .. job_body(j)
    if if_new then
        local old = redis.pcall('SET', job_key(id), v, 'NX', 'GET')
        if type(old) == 'table' and not (old.err and string.find(old.err, 'WRONGTYPE', 1, true)) then
            error(old)
        end
        j.whole = nil
        return load_job(id, false, old) -- (a table: WRONGTYPE, a job of the older layout)
    end
    redis.call('SET', job_key(id), v)
    if j.legacy then
        redis.call('DEL', legacy_body_key(id))
        j.legacy = nil
    end
    j.whole = nil
end

-- Deletes job `id` (j: as load_job answered it).
local function delete_job(id, j)
    if j.legacy then
        redis.call('DEL', job_key(id), legacy_body_key(id))
    else
        redis.call('DEL', job_key(id))
    end
end

local function bucket_key(k) return P .. ':b:' .. k end
local function ready_key(topic) return P .. ':r:' .. topic end
local function buried_key(topic) return P .. ':x:' .. topic end
local function stats_key(topic) return P .. ':s:' .. topic end
-- Ready push jobs of every topic, scored by sequence like a ready set.
local function push_key() return P .. ':push' end
-- Bucket k's delay sets (delay_set_name: 'd:<topic>', 'dc:<topic>'),
-- scored by their earliest due time, or earlier: a removal leaves the score
-- as it was, and the move that finds nothing due sets it right.
local function bucket_sets_key(k) return P .. ':bt:' .. k end
-- Per-topic indexes, so `jobs` pages a topic's jobs of one state without
-- reading the buckets (which hold every topic): reserved jobs by TTR
-- deadline, ready push jobs (which wait in P:push) by their sequence
-- number. Each is changed wherever the job's bucket entry or P:push entry
-- is. (A topic's delayed jobs need none: their delay sets are per topic.)
local function reserved_index(topic) return P .. ':w:' .. topic end
local function push_index(topic) return P .. ':q:' .. topic end
-- A topic's ready jobs set aside in their key's lane (see lane_remove).
local function lanes_index(topic) return P .. ':kr:' .. topic end
-- A kept record of a finished or deleted job, and the indexes of a
-- topic's records of each outcome (see "Kept history" below).
local function record_key(id) return P .. ':h:' .. id end
-- A push job's delivery log (see "Delivery log" below).
local function delivery_key(id) return P .. ':dl:' .. id end
local function history_index(topic, outcome)
    return P .. (outcome == 'finished' and ':hf:' or ':hd:') .. topic
end
-- The sets that list a topic's jobs of a state (a name `jobs` and `purge`
-- take), in the state's order: delay by due time, reserved by TTR
-- deadline, ready by sequence (the ready set merged with the ready push
-- jobs, whose scores share the shard's sequence, and the jobs set aside in
-- their key's lane), buried by sequence;
-- and (`jobs` only) the records of finished and deleted jobs, newest first.
local function state_sets(topic, state)
    if state == 'finished' or state == 'deleted' then return {history_index(topic, state)} end
    if state == 'delay' then return {delay_key(topic, false), delay_key(topic, true)} end
    if state == 'reserved' then return {reserved_index(topic)} end
    if state == 'ready' then return {ready_key(topic), push_index(topic), lanes_index(topic)} end
    return {buried_key(topic)}
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
local function paused_key() return P .. ':paused' end
-- Push jobs of a paused topic that push_take met, with their P:push score,
-- until resume puts them back: so paused jobs never block the others.
local function hold_key(topic) return P .. ':ph:' .. topic end

-- Moves up to n of a topic's oldest held push jobs back to P:push with
-- their scores (so the next ZPOPMIN meets them first); returns how many.
local function unhold_oldest(topic, n)
    if n <= 0 then return 0 end
    local hk = hold_key(topic)
    local held = redis.call('ZRANGE', hk, '0', num(n - 1), 'WITHSCORES')
    if #held == 0 then return 0 end
    local args = {}
    for i = 1, #held, 2 do
        args[#args + 1] = held[i + 1]
        args[#args + 1] = held[i]
    end
    redis.call('ZADD', push_key(), unpack(args))
    redis.call('ZREMRANGEBYRANK', hk, '0', num(#held / 2 - 1))
    return #held / 2
end

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
        v = redis.call('SISMEMBER', paused_key(), topic) == 1
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

-- Ready and buried jobs sit in sorted sets scored by a sequence number, so
-- a pop takes them in the order they came and finish/delete remove them
-- at once: nothing stale is ever left behind. reserve_seq(n) takes n
-- numbers with one INCRBY and returns the first.
local function reserve_seq(n)
    local last = tonumber(redis.call('INCRBY', P .. ':seq', num(n)))
    wake_ids.seq = last
    return last - n + 1
end

-- A job of `topic` became ready: flush() tells
-- the topic's long-polls.
local function note_ready(topic)
    if not ready_topics[topic] then
        ready_topics[topic] = 0
        ready_order[#ready_order + 1] = topic
    end
    ready_topics[topic] = ready_topics[topic] + 1
end

-- Queues a ready job on its topic's ready set, or for delayq-push when it
-- is a push job (push: its URL, or false). Its head says ready, or delay
-- when the move made it ready (see settle_state).
local function enqueue_ready(id, topic, seq, push)
    if push then
        zadd(push_key(), num(seq), id)
        zadd(push_index(topic), num(seq), id)
        push_ready = push_ready + 1
        return
    end
    zadd(ready_key(topic), num(seq), id)
    note_ready(topic)
end

-- Per-key limits (key_concurrency, key_rate; docs/DESIGN.md, "Per-key
-- limits"). Only a topic whose policy has one (or whose lanes are still
-- being drained after it was changed or removed) has these keys:
--   P:klim            the shard's topics with key limits or lanes left
--                     (exists while any does: keys_on())
--   P:kc:<topic>      hash: key -> its jobs reserved now
--   P:ko:<topic>      hash: id -> '<seq>:<key>' for each counted reserved
--                     job: its key and its place in the due order (the
--                     sequence number it was taken at, 0 if unknown)
--   P:kl:<n>:<topic>:<key>  the key's lane (n: the topic's length, so no
--                     two topics' lanes share a name): its ready jobs that
--                     a pop or push_take met while the key was at a
--                     limit, by sequence number
--   P:kt:<n>:<topic>:<key>  the key's token bucket under key_rate
--                     (take_tokens); absent when full
--   P:krt             '<n>:<topic>:<key>' of the keys whose lane waits for
--                     key_rate's next token, scored by when it comes (ms):
--                     the move of bucket 0 and every pop and push_take
--                     move one job of each due lane back
--   P:kr:<topic>      every lane job of the topic, by sequence number
--                     (`jobs` and purge list them, stats count them)
--   P:kw:<topic>      keys with a non-empty lane (scored 0)
--   P:kdrain          topics whose lanes go back to their queue (a
--                     changed or removed limit), a bounded step per call
-- A job in a lane is still `ready` (its head, the ready gauge); it is in
-- neither P:r nor P:push nor P:q.
local function key_limited_key() return P .. ':klim' end
local function key_count_key(topic) return P .. ':kc:' .. topic end
local function key_owner_key(topic) return P .. ':ko:' .. topic end
local function keys_waiting_key(topic) return P .. ':kw:' .. topic end
local function lanes_drain_key() return P .. ':kdrain' end
-- A key of a topic, as one string ('<n>:<topic>:<key>', n the topic's
-- length): a member of P:krt, a part of a lane's or token bucket's name.
local function topic_key(topic, key) return num(#topic) .. ':' .. topic .. ':' .. key end
local function split_topic_key(m)
    local n, rest = string.match(m, '^(%d+):(.*)$')
    n = tonumber(n)
    return string.sub(rest, 1, n), string.sub(rest, n + 2)
end
-- The token bucket of a key under key_rate (take_tokens).
local function key_tokens_key(topic, key) return P .. ':kt:' .. topic_key(topic, key) end
-- Keys whose lane waits for key_rate's next token: topic_key -> when (ms).
local function rate_lanes_key() return P .. ':krt' end
local function lane_key(topic, key) return P .. ':kl:' .. topic_key(topic, key) end
-- How many jobs one call may set aside into lanes or move back from them,
-- beyond what it takes: a pop over a big key's backlog costs at most this.
local LANE_STEP = 1000

-- Does any topic of the shard have key limits (or lanes left)? Without,
-- no function looks at the structures above: one EXISTS per call.
local function keys_on()
    if keys_cache == nil then keys_cache = redis.call('EXISTS', key_limited_key()) == 1 end
    return keys_cache
end

-- Takes a ready job out of its key's lane if it is in one (job j as
-- load_job answered it); returns whether it was.
local function lane_remove(id, j)
    if not keys_on() or redis.call('ZREM', lanes_index(j.t), id) == 0 then return false end
    if j.head_only then j = load_job(id) end -- the key is among the fields some jobs have
    local lk = lane_key(j.t, j.g)
    redis.call('ZREM', lk, id)
    if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', keys_waiting_key(j.t), j.g) end
    return true
end

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
-- its set's head; see bucket_sets_key); false when it has none.
local function bucket_earliest(k)
    local head = false
    for _, key in ipairs({bucket_key(k), bucket_sets_key(k)}) do
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
        redis.call('ZREM', delay_key(j.t, j.push), id)
    elseif state == 'reserved' then
        redis.call('ZREM', bucket_key(j.k), id)
        redis.call('ZREM', reserved_index(j.t), id)
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
        wake_if_earliest(j.k, due)
        zadd(bucket_key(j.k), num(due), id, not batched)
        zadd(reserved_index(j.t), num(due), id, not batched)
        return
    end
    local name, k = delay_set_name(j.t, j.push), topic_bucket(j.t)
    wake_if_earliest(k, due)
    zadd(P .. ':' .. name, num(due), id, not batched)
    -- P:bt's score only ever falls here (LT); one ZADD per set and call
    -- unless a later job of the call is due sooner.
    local listed = delay_listed[name]
    if not listed or due < listed then
        redis.call('ZADD', bucket_sets_key(k), 'LT', num(due), name)
        delay_listed[name] = due
    end
end

-- True when a reserved job has used every delivery its retries allow.
local function retries_spent(n, r, kb)
    r = tonumber(r)
    return r >= 0 and tonumber(n) - tonumber(kb) >= r + 1
end

-- The error for touch, release or bury of a reserved job, or nil when the
-- caller may: a callback job is reserved by delayq-push while its request
-- is in flight, and only that request's outcome may end the reservation
-- (else it could be sent again, or expire, while the first still runs).
local function reserved_conflict(j)
    if j.s ~= 'reserved' then return redis.error_reply('DQ_CONFLICT ' .. j.s) end
    if j.push then return redis.error_reply('DQ_CONFLICT delivering') end
    return nil
end

-- Backoff steps in seconds as a JSON array ("[15,180.5]") -> "15000,180500".
local function backoff_ms(text)
    local out = {}
    for x in string.gmatch(text, '[^%[%],]+') do
        out[#out + 1] = num(math.floor(tonumber(x) * 1000 + 0.5))
    end
    return table.concat(out, ',')
end

-- A topic's flow-control policy: the hash P:pol:<topic>, a copy in every
-- shard (policy.lua writes them all), with the fields below (counts, and
-- periods and keep in ms); P:policies lists the topics that have one.
-- One more field is no limit but kept there because a pop reads the hash
-- anyway: LANES_DRAINING, while the topic's key lanes go back to its queue
-- (key_limit_changed). POLICY_FIELDS, the fields' names in order, comes
-- with the constants (src/job/job.h, DQ_POLICY_FIELDS).
local LANES_DRAINING = 'lanes_draining'
local function policy_key(topic) return P .. ':pol:' .. topic end
local function policies_key() return P .. ':policies' end

-- Does policy pol (as read_policy answers it) set any limit?
local function has_policy(pol)
    for _, f in ipairs(POLICY_FIELDS) do
        if pol[f] ~= nil then return true end
    end
    return false
end

-- The topic's policy in this shard: {field = number} of the fields set.
local function read_policy(topic)
    local h = redis.call('HGETALL', policy_key(topic))
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
        redis.call('ZADD', push_key(), num(seq), id)
        redis.call('ZADD', push_index(topic), num(seq), id)
        push_ready = push_ready + 1
    else
        redis.call('ZADD', ready_key(topic), num(seq), id)
        note_ready(topic)
    end
end

-- Sets ready job j, just taken from its queue at sequence number seq,
-- aside in its key's lane.
local function lane_add(id, j, seq)
    local topic, key = j.t, j.g
    redis.call('ZADD', lane_key(topic, key), num(seq), id)
    redis.call('ZADD', lanes_index(topic), num(seq), id)
    redis.call('ZADD', keys_waiting_key(topic), '0', key)
    if j.push then redis.call('ZREM', push_index(topic), id) end
end

-- Moves up to n of a key's oldest lane jobs back to the topic's queue;
-- returns how many.
local function lane_release(topic, key, n)
    local lk = lane_key(topic, key)
    local jobs = redis.call('ZRANGE', lk, '0', num(n - 1), 'WITHSCORES')
    if #jobs == 0 then return 0 end
    local ids = {}
    for i = 1, #jobs, 2 do
        local id = jobs[i]
        local j = load_job(id, true) -- a lane entry goes with its job, so it exists
        ids[#ids + 1] = id
        requeue(id, topic, tonumber(jobs[i + 1]), j.push)
    end
    redis.call('ZREM', lanes_index(topic), unpack(ids))
    redis.call('ZREMRANGEBYRANK', lk, '0', num(#ids - 1))
    if redis.call('EXISTS', lk) == 0 then redis.call('ZREM', keys_waiting_key(topic), key) end
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
    local rk = rate_lanes_key()
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
    local rk = rate_lanes_key()
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
        local key = redis.call('ZRANGE', keys_waiting_key(topic), '0', '0')[1]
        if not key then break end
        moved = moved + lane_release(topic, key, n - moved)
    end
    if redis.call('EXISTS', keys_waiting_key(topic)) == 0 then
        redis.call('SREM', lanes_drain_key(), topic)
        redis.call('HDEL', policy_key(topic), LANES_DRAINING)
        local pol = read_policy(topic)
        if not pol.key_concurrency and not pol.key_rate then
            redis.call('SREM', key_limited_key(), topic)
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
    for _, topic in ipairs(redis.call('SRANDMEMBER', lanes_drain_key(), '8')) do
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
    local key = j.g
    if not key then return true end
    local pol = policy_of(j.t)
    local limit, rate = pol.key_concurrency, pol.key_rate
    if not limit and not rate then return true end
    local topic = j.t
    local ck = key_count_key(topic)
    local inflight = limit and tonumber(redis.call('HGET', ck, key) or '0')
    seq = tonumber(seq)
    if limit and inflight >= limit then
        lane_add(id, j, seq)
        return false
    end
    -- Room, but older jobs of the key wait in its lane (the limit was
    -- raised, lanes are draining, a token came): the oldest goes first.
    local head = redis.call('ZRANGE', lane_key(topic, key), '0', '0', 'WITHSCORES')
    if head[2] and tonumber(head[2]) < seq then
        lane_add(id, j, seq)
        -- (unless the lane waits for a token: the oldest is let go then)
        if not (rate and redis.call('ZSCORE', rate_lanes_key(), topic_key(topic, key))) then
            lane_release(topic, key, 1)
        end
        return false
    end
    if rate then
        local taken, wait = take_tokens(key_tokens_key(topic, key), rate, pol.key_period_ms or 1000, 1,
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
        redis.call('HSET', key_owner_key(topic), id, num(seq) .. ':' .. key)
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
    local ok = key_owner_key(topic)
    local v = redis.call('HGET', ok, id)
    if not v then return nil end
    redis.call('HDEL', ok, id)
    local seq, key = string.match(v, '^(%d+):(.*)$')
    local ck = key_count_key(topic)
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
    local lk = lane_key(topic, key)
    if redis.call('EXISTS', lk) == 0 then return end
    local pol = policy_of(topic)
    local limit = pol.key_concurrency
    if limit and tonumber(redis.call('HGET', key_count_key(topic), key) or '0') >= limit then return end
    if pol.key_rate and redis.call('ZSCORE', rate_lanes_key(), topic_key(topic, key)) then return end
    lane_release(topic, key, 1)
end

-- Takes a job out of its topic's ready or buried set, whichever holds it
-- (or its key's lane); j: as load_job answered it, in its current state,
-- or in the state it is leaving when given (state).
local function unlist(id, j, state)
    local topic, push = j.t, j.push
    state = state or j.s
    if state == 'ready' then
        if lane_remove(id, j) then return end
        if push then
            redis.call('ZREM', push_key(), id)
            redis.call('ZREM', push_index(topic), id)
            redis.call('ZREM', hold_key(topic), id) -- held while its topic is paused
        else
            redis.call('ZREM', ready_key(topic), id)
        end
        if keys_on() then
            if j.head_only then j = load_job(id) end -- the key is among the fields some jobs have
            if j.g then key_turn_passes(topic, j.g) end
        end
    elseif state == 'buried' then
        redis.call('ZREM', buried_key(topic), id)
    end
end

-- Counts the keys of a topic's reserved jobs (its index P:w) into P:kc and
-- P:ko, when a key limit is set on a topic that had none: so jobs already
-- in flight count against it at once. Their place is unknown (0).
local function key_count_reserved(topic)
    local ck, ok = key_count_key(topic), key_owner_key(topic)
    redis.call('DEL', ck, ok)
    for _, id in ipairs(redis.call('ZRANGE', reserved_index(topic), '0', '-1')) do
        local j = load_job(id)
        if j and j.g then
            redis.call('HINCRBY', ck, j.g, '1')
            redis.call('HSET', ok, id, '0:' .. j.g)
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
        redis.call('SADD', key_limited_key(), topic)
        keys_cache = true
    end
    if kc and not old.key_concurrency then key_count_reserved(topic) end
    if not kc then redis.call('DEL', key_count_key(topic), key_owner_key(topic)) end
    local lowered = kc and old.key_concurrency and kc < old.key_concurrency and
        old.key_rate == rate and old.key_period_ms == new.key_period_ms
    local had = old.key_concurrency or old.key_rate
    if had and not lowered then
        redis.call('SADD', lanes_drain_key(), topic)
        redis.call('HSET', policy_key(topic), LANES_DRAINING, '1') -- its pops drain too
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
local function history_flag_key() return P .. ':history' end

local function history_on()
    if history_cache == nil then
        history_cache = redis.call('EXISTS', history_flag_key()) == 1
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
    local v = redis.call('GET', record_key(id))
    if not v then return nil end
    local o, c, du, fd, e, n, tlen, at = struct.unpack(RECORD, v)
    local g = string.sub(v, at + tlen)
    return {id = id, outcome = OUTCOME_NAME[o], t = string.sub(v, at, at + tlen - 1), c = c, du = du,
        fd = fd, e = e, n = n, g = g ~= '' and g or nil}
end

-- Does a record (of topic `topic`, ended at `ended`) stand behind an index
-- entry? An entry outlives its record when the record expired, or was
-- replaced by a later one of the same id (in another topic, once this one
-- had expired).
local function record_of_entry(id, topic, ended)
    local r = load_record(id)
    if r and r.t == topic and r.e == ended then return r end
    return nil
end

-- Trims a topic's history indexes: entries older than keep (their records
-- expired, or were written under a longer keep since lowered) and, while
-- the two hold more than HISTORY_CAP entries, the oldest; at most
-- HISTORY_TRIM_STEP of them, oldest first. A trimmed entry's record goes
-- with it.
local function trim_history(topic, now, keep)
    local keys = {history_index(topic, 'finished'), history_index(topic, 'deleted')}
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
            redis.call('DEL', record_key(oldest[1]), delivery_key(oldest[1]))
        end
        total = total - 1
    end
end

-- Leaves the record of job j (as load_job answered it, whole), which is
-- being removed as `kind` ('finished' or 'deleted'), for keep ms.
local function keep_record(id, j, kind, keep)
    local now = clock()
    redis.call('SET', record_key(id), struct.pack(RECORD, OUTCOME_CODE[kind], j.c, j.du or -1,
        j.fd or -1, now, j.n, #j.t) .. j.t .. (j.g or ''), 'PX', num(keep))
    local other = kind == 'finished' and 'deleted' or 'finished'
    redis.call('ZREM', history_index(j.t, other), id)
    local ik = history_index(j.t, kind)
    redis.call('ZADD', ik, num(-now), id)
    trim_history(j.t, now, keep)
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
    local key = delivery_key(id)
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
        e.decision, e.retry_at = 'retry', state == 'delay' and j.d or now
    end
    log_delivery(id, e)
end

-- The delivery log as get answers it (false when there is none).
local function deliveries_view(id)
    local list = redis.call('LRANGE', delivery_key(id), '0', '-1')
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
    if j.n == 1 and keep_of(j.t) > 0 then j.fd, j.whole = now, true end
end

-- A record as get and `jobs` answer it: job_view's fields, state its
-- outcome, no body, ttr or retries.
-- reply job_view: state topic body due ttr_ms attempts retries created backoff url timeout_ms last_at last_status last_error key traceparent tracestate ended first_delivered deliveries
local function record_view(r)
    return reply_job_view{state = r.outcome, topic = r.t, body = false, due = r.du, ttr_ms = false,
        attempts = r.n, retries = false, created = r.c, backoff = false, url = false,
        timeout_ms = false, last_at = false, last_status = false, last_error = false,
        key = r.g or false, traceparent = false, tracestate = false, ended = r.e,
        first_delivered = r.fd, deliveries = deliveries_view(r.id)}
end

-- A job as the fields of f describe it: topic, body, ttr (ms), retries
-- (-1 unlimited), k (bucket) and due (ms; due <= now means ready at once);
-- optional backoff (JSON array of seconds), url and timeout (ms) of a
-- callback, key (the grouping key), traceparent and tracestate (its trace
-- context). In a topic that keeps history it also holds its due time, for
-- its record. Not yet stored (place_job does).
local function job_of_fields(f, now)
    local ready = f.due <= now
    local j = {s = ready and 'ready' or 'delay', t = f.topic, ttr = tonumber(f.ttr), n = 0,
        r = tonumber(f.retries), kb = 0, c = now, k = tonumber(f.k), d = ready and -1 or f.due,
        rt = ready and now or nil, body = f.body, whole = true, push = f.url ~= nil}
    if f.backoff then j.bo = backoff_ms(f.backoff) end
    if f.url then j.u, j.to = f.url, tonumber(f.timeout) end
    j.g, j.tp, j.ts = f.key, f.traceparent, f.tracestate
    if keep_of(f.topic) > 0 then j.du = f.due end -- for its record
    return j
end

-- Stores job j (as job_of_fields made it) and puts it where its state
-- says: its topic's ready queue (sequence number seq) or, delayed, its
-- bucket and index, written by flush() (batched). Counts it in its state.
local function place_job(id, j, seq, stored)
    if not stored then store_job(id, j) end
    if j.s == 'ready' then
        enqueue_ready(id, j.t, seq, j.u)
    else
        due_set_add(id, j, j.d, 'delay', true)
    end
    count(j.t, j.s, 1)
    return j.s
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

-- Creates job `id` (the caller made sure it does not exist) from the
-- fields of f (see job_of_fields); a job ready at once takes sequence
-- number seq. Counts it. Returns 'ready' or 'delay'. stored: the job as
-- job_of_fields made it and store_job(id, j, true) wrote it.
local function create_job(id, f, now, seq, stored)
    note_if_born_in_purge(id, f.topic, now)
    local state = place_job(id, stored or job_of_fields(f, now), seq, stored)
    count(f.topic, 'added', 1)
    count(f.topic, 'jobs', 1)
    return state
end


-- Drops the kept record of `id` (r, as load_record answered it), its
-- entry in its topic's history index and its delivery log: for an upsert
-- that makes the id live again (an id is kept or live, never both; the
-- log, which expires with the record, would otherwise expire under the
-- new job).
local function drop_record(id, r)
    redis.call('ZREM', history_index(r.t, r.outcome), id)
    redis.call('DEL', record_key(id), delivery_key(id))
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
    return reply_job_view{state = j.s, topic = j.t, body = job_body(j), due = j.d, ttr_ms = j.ttr,
        attempts = j.n, retries = j.r, created = j.c, backoff = opt(j.bo), url = opt(j.u),
        timeout_ms = opt(j.to), last_at = opt(j.la), last_status = opt(j.ls),
        last_error = opt(j.le), key = opt(j.g), traceparent = opt(j.tp), tracestate = opt(j.ts),
        ended = -1, first_delivered = j.fd or -1, deliveries = j.push and deliveries_view(id)}, j
end

-- ==========================================================================
-- The job's life cycle (docs/DESIGN.md, "The job's life cycle"), declared
-- once. A job is in one of LIFECYCLE.states (its head's s); an edge moves
-- it from one of its `from` states to `to` (a state, or 'ended': its key
-- is deleted), and runs the edge's hooks in order: each is the
-- bookkeeping of one feature (counters, deliveries, due sets, queues, a
-- key's room, kept records) that hangs on that edge. transition() is the
-- only code that changes a job's state for the edges declared here:
-- scripts/check-lifecycle fails the build on a write of the state anywhere
-- else, but for the writes its allowlist still names (edges not declared
-- yet).
-- `make lifecycle-chart` draws DESIGN's chart from this table: keep one
-- edge a line.
-- ==========================================================================
local LIFECYCLE = {
    states = {'delay', 'ready', 'reserved', 'buried'},
    edges = {
        {name = 'reserve', from = {'ready'}, to = 'reserved', hooks = {'count_delivery', 'store', 'unindex_push', 'enter_due_set', 'count_move', 'count_popped'}},
        {name = 'touch', from = {'reserved'}, to = 'reserved', hooks = {'store', 'enter_due_set'}},
        {name = 'give_back', from = {'reserved'}, to = 'ready', hooks = {'leave_due_set', 'key_place', 'uncount_delivery', 'store', 'enqueue', 'count_move', 'uncount_popped'}},
        {name = 'retry', from = {'reserved'}, to = 'ready', hooks = {'leave_due_set', 'key_place', 'ready_since_now', 'store', 'enqueue', 'count_move'}},
        {name = 'release', from = {'reserved'}, to = 'delay', hooks = {'leave_due_set', 'end_key_reservation', 'store', 'enter_due_set', 'count_move'}},
        {name = 'bury', from = {'reserved'}, to = 'buried', hooks = {'leave_due_set', 'end_key_reservation', 'take_seq', 'store', 'enter_buried', 'count_move'}},
        {name = 'kick', from = {'buried'}, to = 'ready', hooks = {'leave_buried', 'fresh_retries', 'ready_since_now', 'store', 'enqueue', 'count_move', 'count_kicked'}},
        {name = 'reschedule', from = {'delay', 'ready', 'buried'}, to = 'delay', hooks = {'leave', 'fresh_retries', 'record_due', 'store', 'enter_due_set', 'count_move'}},
        {name = 'reschedule_now', from = {'delay', 'ready', 'buried'}, to = 'ready', hooks = {'leave', 'fresh_retries', 'record_due', 'take_seq', 'ready_since_now', 'store', 'enqueue', 'count_move'}},
        {name = 'replace', from = {'delay', 'ready', 'buried'}, to = 'delay', hooks = {'write_zadds', 'leave', 'renew', 'store', 'enter_due_set', 'count_move'}},
        {name = 'replace_ready', from = {'delay', 'ready', 'buried'}, to = 'ready', hooks = {'write_zadds', 'leave', 'renew', 'store', 'enqueue', 'count_move'}},
        {name = 'finish', from = {'delay', 'ready', 'reserved', 'buried'}, to = 'ended', hooks = {'keep_record', 'keep_delivery_log', 'leave', 'count_end', 'delete'}},
        {name = 'delete', from = {'delay', 'ready', 'reserved', 'buried'}, to = 'ended', hooks = {'keep_record', 'keep_delivery_log', 'leave', 'count_end', 'delete'}},
    },
    -- The hooks, by name. Each is called as hook(id, j, at): j the job,
    -- already in its new state (j.s, and j.d: at.due while delay or
    -- reserved, else -1), at the edge's arguments (below) and at.from the
    -- state it left.
    --   at.due      delay or reserved: when the timer looks at it again
    --   at.seq      its place in the queue it joins (else one is taken)
    --   at.now      the call's time (a delivery's)
    --   at.asked    the due time asked for (a reschedule's, for the record)
    --   at.kind     an end's counter and outcome: 'finished' or 'deleted'
    --   at.fields   a replace's new definition (see job_of_fields)
    --   at.keep     how long an end's record is kept (ms; 0: none)
    --   at.batched  due set entries wait for flush() (see due_set_add)
    --   at.unlisted the caller took it out of the set it leaves already
    --               (the move, a kick: in one command for all)
    hooks = {
        -- the write of its head (and of the rest when j.whole)
        store = function(id, j) store_job(id, j) end,
        -- per-state counters (stats)
        count_move = function(_, j, at) move_count(j.t, at.from, j.s) end,
        count_popped = function(_, j) count(j.t, 'popped', 1) end,
        uncount_popped = function(_, j) count(j.t, 'popped', -1) end,
        count_kicked = function(_, j) count(j.t, 'kicked', 1) end,
        -- deliveries (attempts) and retries
        count_delivery = function(_, j, at)
            j.n = j.n + 1
            note_delivery(j, at.now)
        end,
        uncount_delivery = function(_, j)
            j.n = j.n - 1
            if j.n == 0 and j.fd then j.fd, j.whole = nil, true end -- never delivered, after all
        end,
        -- a buried job comes back with a fresh allowance of retries
        fresh_retries = function(_, j, at)
            if at.from == 'buried' then j.kb = j.n end
        end,
        -- a kept record's due time (a topic that keeps history)
        record_due = function(_, j, at)
            if j.du then j.du, j.whole = at.asked, true end
        end,
        -- due sets: the delay sets, the buckets and reserved indexes
        enter_due_set = function(id, j, at) due_set_add(id, j, j.d, j.s, at.batched) end,
        leave_due_set = function(id, j, at)
            if not at.unlisted then due_set_remove(id, j, at.from) end
        end,
        -- leave: out of whichever set its old state kept it in (and a
        -- reservation's key room)
        leave = function(id, j, at)
            if at.from == 'delay' or at.from == 'reserved' then
                due_set_remove(id, j, at.from)
                if at.from == 'reserved' then key_reservation_ends(id, j.t) end
            else
                unlist(id, j, at.from)
            end
        end,
        -- queues: ready (or P:push), buried
        ready_since_now = function(_, j) j.rt = clock() end,
        enqueue = function(id, j, at) enqueue_ready(id, j.t, at.seq, j.push) end,
        unindex_push = function(id, j)
            if j.push then redis.call('ZREM', push_index(j.t), id) end
        end,
        take_seq = function(_, _, at) at.seq = at.seq or reserve_seq(1) end,
        enter_buried = function(id, j, at)
            zadd(buried_key(j.t), num(at.seq), id)
            count(j.t, 'buries', 1)
        end,
        leave_buried = function(id, j, at)
            if not at.unlisted then redis.call('ZREM', buried_key(j.t), id) end
        end,
        -- a replace: the call's batched set entries written first (a batch
        -- may name an id twice), then the job becomes the one at.fields
        -- describe, in place (see replace_job)
        write_zadds = function() write_zadds() end,
        renew = function(id, j, at)
            local f = at.fields
            local new = job_of_fields(f, at.now)
            new.c, new.legacy = j.c, j.legacy
            if not f.traceparent and not f.tracestate then new.tp, new.ts = j.tp, j.ts end
            if j.push and not new.push then redis.call('DEL', delivery_key(id)) end
            for k in pairs(j) do
                if k ~= 's' then j[k] = nil end
            end
            for k, v in pairs(new) do
                if k ~= 's' then j[k] = v end
            end
        end,
        -- the end: its record kept (a topic that keeps history), its
        -- callback's delivery log as long as its record, the job deleted
        keep_record = function(id, j, at)
            if at.keep > 0 then keep_record(id, j, at.kind, at.keep) end
        end,
        keep_delivery_log = function(id, j, at)
            if not j.push then return end
            if at.keep > 0 then
                redis.call('PEXPIRE', delivery_key(id), num(at.keep))
            else
                redis.call('DEL', delivery_key(id))
            end
        end,
        count_end = function(_, j, at)
            count(j.t, at.from, -1)
            count(j.t, at.kind, 1)
            count(j.t, 'jobs', -1)
        end,
        delete = function(id, j) delete_job(id, j) end,
        -- per-key limits: the key's room (key_reservation_ends)
        end_key_reservation = function(id, j) key_reservation_ends(id, j.t) end,
        -- back to ready, it takes the room it frees, at the caller's place,
        -- else the one it had when taken, else a new one
        key_place = function(id, j, at)
            local kept = key_reservation_ends(id, j.t, true)
            at.seq = at.seq or kept or reserve_seq(1)
        end,
    },
}

-- Moves job j along `edge` (a name in LIFECYCLE.edges) with its arguments
-- `at` (see the hooks); returns its new state. A job not in one of the
-- edge's from states is a bug of the caller: an error, before any write.
local function transition(id, j, edge, at)
    local edges = LIFECYCLE.edges
    if not edges.by_name then
        -- made on the first call: the library's load runs no loops (Redis
        -- gives it no ipairs); the table never changes after
        local by_name = {}
        for _, e in ipairs(edges) do
            e.leaves = {}
            for _, s in ipairs(e.from) do e.leaves[s] = true end
            by_name[e.name] = e
        end
        edges.by_name = by_name
    end
    local e = edges.by_name[edge]
    if not e then error('lifecycle: no edge ' .. tostring(edge)) end
    if not e.leaves[j.s] then error('lifecycle: ' .. edge .. ' from ' .. tostring(j.s)) end
    at = at or {}
    at.from = j.s
    j.s = e.to
    if e.to == 'delay' or e.to == 'reserved' then j.d = at.due else j.d = -1 end
    for _, h in ipairs(e.hooks) do LIFECYCLE.hooks[h](id, j, at) end
    return j.s
end
-- ==========================================================================
-- end of the job's life cycle
-- ==========================================================================

-- Upsert: job `id` (old, as load_job answered it, whole), delayed, ready
-- or buried, becomes the job the fields of f describe (see job_of_fields),
-- in the same topic, bucket and shard (both follow from the id). It
-- leaves every set of its old state, so nothing stale stays; its counts
-- move to its new state. What the replace keeps: when it was created, its
-- trace context where f gives none, and a push job's delivery log (the
-- attempts made are history; a job that is no push job any more keeps
-- none, since nothing would remove it). Its attempts start again at 0: it
-- is a new definition, whose retries and backoff count from its own first
-- delivery. Returns its new state ('ready' or 'delay').
local function replace_job(id, old, f, now, seq)
    local edge = f.due <= now and 'replace_ready' or 'replace' -- as job_of_fields decides
    return transition(id, old, edge, {fields = f, now = now, seq = seq, due = f.due, batched = true})
end

-- Removes job j (as load_job answered it) whatever its state; kind is the
-- counter it goes to ('finished' or 'deleted'). Its record is kept when
-- its topic keeps history, unless no_record (purge).
local function remove_job(id, j, kind, no_record)
    local keep = not no_record and keep_of(j.t) or 0
    -- the record takes fields of the tail a head-only read left out
    if keep > 0 and j.head_only then j = load_job(id) end
    transition(id, j, kind == 'finished' and 'finish' or 'delete', {kind = kind, keep = keep})
end

-- Removes the jobs named by argv[from..to], each in its own right: one item
-- per id, 'ok' or 'DQ_NOT_FOUND' (no such job, or not the caller's topic:
-- the two answer alike, so a token limited to topics cannot learn which
-- other ids exist). limit_topics() must have run.
local function remove_ids(argv, kind, from, to)
    local out = {}
    for i = from, to do
        local id = argv[i]
        local j = load_job(id, true) -- removing needs only the head
        if not j or not allowed(j.t) then
            out[#out + 1] = 'DQ_NOT_FOUND'
        else
            remove_job(id, j, kind)
            out[#out + 1] = 'ok'
        end
    end
    return out
end

-- The least wait after a callback's 429 or 503 with Retry-After, whatever
-- it asks (0, a past date): a busy receiver gets a breather.
local BUSY_WAIT_MIN_MS = 1000

-- The wait after delivery number n failed: step n of the backoff steps
-- ("15000,180000"), the last one repeating.
local function backoff_step(bo, n)
    local i, last = 0, 0
    for x in string.gmatch(bo, '%d+') do
        i = i + 1
        last = tonumber(x)
        if i >= n then break end
    end
    return last
end

-- After delivery number n of a reserved job failed (its TTR passed, a
-- release without a delay, a failed callback), the job is buried when its
-- retries are spent, else ready again: after `wait` ms when given (a
-- callback's Retry-After, at most the last backoff step), else after its
-- backoff step, else at once. j is the job as load_job answered it;
-- unlisted: the caller took it out of its bucket and its topic's reserved
-- index already (the move). Returns the new state.
local function after_failure(id, j, now, wait, unlisted)
    if retries_spent(j.n, j.r, j.kb) then
        return transition(id, j, 'bury', {unlisted = unlisted})
    end
    local delay = 0
    -- steps count from the latest kick, as retries do (kb)
    if j.bo then delay = backoff_step(j.bo, j.n - j.kb) end
    if wait then -- a busy receiver: never sooner than BUSY_WAIT_MIN_MS
        if j.bo then wait = math.min(wait, backoff_step(j.bo, 1e9)) end
        delay = math.max(wait, BUSY_WAIT_MIN_MS)
    end
    if delay <= 0 then
        -- Under a key limit the job goes back to its place, before its
        -- key's later jobs (a serial key keeps its due order).
        return transition(id, j, 'retry', {unlisted = unlisted})
    end
    return transition(id, j, 'release', {due = now + delay, unlisted = unlisted})
end

-- This shard's place: its index and the deployment's shard count, read
-- once per library load (they never change while the data exists).
local shard_place = {}
local function shard_index_count()
    local place = shard_place[P]
    if not place then
        local k = tonumber(string.match(P, ':(%d+)}$') or '0')
        place = {k, tonumber(redis.call('GET', P .. ':shards') or '1')}
        shard_place[P] = place
    end
    return place[1], place[2]
end

-- This shard's share of a topic-wide limit: the shards split it, shard k
-- getting floor(limit / shards), plus one for the first limit mod shards
-- of them, so the shares add up to the limit exactly (the policy command
-- refuses a concurrency below the shard count, which would leave a shard
-- none).
local function shard_share(limit)
    local k, shards = shard_index_count()
    return math.floor(limit / shards) + (k < limit % shards and 1 or 0)
end

-- How many more jobs of the topic this shard may reserve now under its
-- `concurrency` (nil: no such limit): its share less the jobs reserved,
-- counting this call's changes, which flush() has not written yet.
local function concurrency_room(topic)
    local limit = policy_of(topic).concurrency
    if not limit then return nil end
    local reserved = tonumber(redis.call('HGET', stats_key(topic), 'reserved') or '0')
    local pending = counters[topic] and counters[topic].reserved or 0
    return math.max(0, shard_share(limit) - reserved - pending)
end

-- A topic's `rate` per `period` is a token bucket too (take_tokens
-- above): up to `rate` tokens, refilled at rate/period_ms per ms, a
-- delivery spending a whole one; so in any window of one period at most
-- rate + rate deliveries pass (a full bucket, then a period's refill): the
-- contract's "plus a burst of at most rate", and over a long run exactly
-- rate per period. A sliding window would keep one entry per delivery
-- where a bucket is two numbers. peek_tokens is take_tokens' read-only
-- view: the whole tokens now and the ms until the next (0: one is there).
local function peek_tokens(bucket, rate, period_ms, now)
    local tokens = bucket_tokens(bucket, rate, period_ms, now)
    return math.floor(tokens), token_wait(tokens, rate, period_ms)
end

-- A topic's bucket for its `rate`, in each shard.
local function rate_bucket_key(topic) return P .. ':tk:' .. topic end
-- Topics with push jobs held for their `rate`, scored by when a token is
-- next due (ms): push_take puts them back then.
local function rate_held_key() return P .. ':rh' end

-- This shard's part of the topic's `rate` per `period` (nil: no rate):
-- the shards split it evenly, a fraction each if need be (a bucket takes
-- fractional rates as they are), so the parts add up to the rate
-- exactly. The policy command refuses a rate below the shard count: a
-- shard's bucket would then hold less than one token, and the shards'
-- bursts together would pass the contract's one burst of `rate`.
local function rate_share(topic)
    local pol = policy_of(topic)
    if not pol.rate then return nil end
    local _, shards = shard_index_count()
    return pol.rate / shards, pol.period_ms or 1000
end

-- How many more jobs of the topic this shard may deliver now under its
-- `rate` (nil: no such limit), and the ms until its next token. Read only:
-- spend_tokens takes what was delivered.
local function rate_room(topic, now)
    local rate, period_ms = rate_share(topic)
    if not rate then return nil end
    return peek_tokens(rate_bucket_key(topic), rate, period_ms, now)
end

-- Spends n of the topic's tokens, for n jobs delivered (no-op without a
-- rate); returns the ms until its next token.
local function spend_tokens(topic, n, now)
    local rate, period_ms = rate_share(topic)
    if not rate or n <= 0 then return 0 end
    local _, wait = take_tokens(rate_bucket_key(topic), rate, period_ms, n, now)
    return wait
end

-- What a topic's limits hold back in this shard now (policies, stats):
-- throttled, its ready jobs that its `concurrency` or `rate` holds back
-- (those pop could take beyond the room the shard's share leaves, or
-- beyond its tokens, and the push jobs push_take holds for them) plus the
-- jobs set aside in their key's lane; keys_waiting, the keys that have
-- such jobs; tokens, the whole tokens its share of a `rate` has now
-- (false: no rate).
local function limits_use(topic, now)
    local room = concurrency_room(topic)
    local tokens = rate_room(topic, now)
    if tokens and (not room or tokens < room) then room = tokens end
    local throttled = 0
    if room then
        throttled = math.max(0, redis.call('ZCARD', ready_key(topic)) - room)
        if not paused(topic) then -- push jobs held for the limits
            throttled = throttled + redis.call('ZCARD', hold_key(topic))
        end
    end
    throttled = throttled + redis.call('ZCARD', lanes_index(topic))
    return {throttled = throttled, keys_waiting = redis.call('ZCARD', keys_waiting_key(topic)),
        tokens = tokens or false}
end

-- A policy as the replies give it: every field, false where unset.
local function policy_view(pol)
    local v = {}
    for _, f in ipairs(POLICY_FIELDS) do
        if pol[f] == nil then v[f] = false else v[f] = pol[f] end
    end
    return v
end

-- Schedules (periodic jobs): P:sch:<id> is a schedule's hash (t topic, b
-- body, ttr, r retries, cron expression or '' and ev seconds or 0, tz, st
-- start and en end (Unix s, -1 none), a anchor (Unix s), n next fire (ms,
-- -1 none), l last fire (ms, -1 none), m missed fires, c created (ms));
-- P:sched holds the ids that have a next fire, scored by it; P:sched:ids
-- every id, scored 0 (listed by name).
local function sched_key(id) return P .. ':sch:' .. id end

-- A fire's job id: '<schedule id>@<fire in Unix seconds>' (FIRE_SEP; built
-- in C by store_fire_id, which also tells the schedule's shard from it).
local function fire_job_id(id, fire_ms)
    return id .. FIRE_SEP .. num(math.floor(fire_ms / 1000))
end

-- Sets a schedule's next fire in P:sched (-1: none). When it becomes the
-- earliest, the timer that fires the shard's schedules is told ("sched:<ms>"
-- on P:wake), since it sleeps until the earliest one.
local function sched_set_next(id, next_ms)
    local key = P .. ':sched'
    if next_ms < 0 then
        redis.call('ZREM', key, id)
        return
    end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    redis.call('ZADD', key, num(next_ms), id)
    if not first[2] or next_ms < tonumber(first[2]) then
        redis.call('SPUBLISH', P .. ':wake', 'sched:' .. num(next_ms))
    end
end

-- The stored layout: which keys exist and of what type, numbered; every
-- change of it since the first release is a row of the table in
-- docs/OPERATIONS.md ("Upgrading without losing jobs"). P:layout records
-- it, written by the first process of a deployment or by the migration
-- (migrate.lua); before it existed nothing recorded it and stored_layout()
-- tells it from the data. These functions read and write LAYOUT only: a
-- shard of another layout is refused whole (DQ_LAYOUT_OLD, DQ_LAYOUT_NEW)
-- before a function touches it, so no function half-reads a structure.
local LAYOUT = 9
local function layout_key() return P .. ':layout' end
-- The layout a migration of the shard began from, set by its first step
-- and removed by its last (migrate.lua): a shard migrated partway is in
-- that layout for every process, whatever its data looks like meanwhile.
local function migrating_key() return P .. ':migrate:from' end

-- Does every delayed, reserved and ready push job of the shard stand in
-- its topic's index (layouts 6 to 8)? Looks at each bucket's and P:push's
-- first entry: layouts before 6 indexed none, 6 to 8 every one (delayed
-- jobs of every kind in P:d:<topic>, beside their bucket entry).
-- Second answer: whether any bucket holds an entry (without one, such
-- data is layout 9 already: what 9 changed is where delayed jobs wait).
local function indexed(nb)
    local entries = false
    local function head_indexed(key, index_of)
        local first = redis.call('ZRANGE', key, 0, 0)
        if not first[1] then return true end
        if key ~= push_key() then entries = true end
        local j = read_job(first[1], true)
        local ik = j and index_of(j)
        return not ik or redis.call('ZSCORE', ik, first[1]) ~= false
    end
    local function bucket_index(j)
        if j.s == 'delay' then return delay_key(j.t, false) end -- (callbacks too, up to 8)
        return j.s == 'reserved' and reserved_index(j.t)
    end
    for k = 0, nb - 1 do
        if not head_indexed(bucket_key(k), bucket_index) then return false end
    end
    return head_indexed(push_key(), function(j) return push_index(j.t) end), entries
end

-- The layout the shard's data is in: P:layout, or for data written before
-- that key existed (layouts 1 to 8), the oldest layout whose structures it
-- matches (1: lists and a set of topics; 2-5: sorted sets without
-- per-topic indexes, told apart by the keys each added; 6-8, which differ
-- in nothing the functions of 8 could not read, count as 8, or as
-- LAYOUT when no bucket holds an entry), or nil for a shard that holds
-- nothing yet. Every process from layout 9 on records its layout when it
-- starts. A shard being migrated is in the layout its migration began
-- from, until the migration records LAYOUT.
local function stored_layout()
    local v = redis.call('GET', layout_key()) or redis.call('GET', migrating_key())
    if v then return tonumber(v) end
    local nb = redis.call('GET', P .. ':buckets')
    if not nb then return nil end
    if redis.call('TYPE', P .. ':topics').ok == 'set' then return 1 end
    local indexes, entries = indexed(tonumber(nb))
    if indexes then return entries and 8 or LAYOUT end
    if redis.call('EXISTS', P .. ':sched:ids') > 0 then return 5 end
    if redis.call('EXISTS', push_key()) > 0 then return 4 end
    if redis.call('EXISTS', P .. ':shards') > 0 then return 3 end
    return 2
end

-- Shards this library's Lua state saw at LAYOUT. A shard's layout only
-- moves forward while Redis runs (the migration is its only writer), so
-- each is read once per library load, not once per call.
local layout_seen = {}

-- nil when the shard may be used (it is at LAYOUT, or holds nothing
-- yet), else the error every function answers instead of running.
local function layout_refused()
    if layout_seen[P] then return nil end
    local v = stored_layout()
    if v == LAYOUT then
        if redis.call('EXISTS', layout_key()) == 1 then layout_seen[P] = true end
        return nil
    end
    if not v then return nil end
    return redis.error_reply((v < LAYOUT and 'DQ_LAYOUT_OLD ' or 'DQ_LAYOUT_NEW ') .. num(v) ..
        ' ' .. num(LAYOUT))
end

-- Every process of a deployment must split jobs into the same number of
-- shards and buckets, or jobs would land where no process looks. The first
-- process records both in each shard, with the layout; a process configured
-- differently is refused. Returns nil when they match, else the error to
-- answer.
-- The counts a shard recorded change only after its keys were removed (a
-- deployment that starts again), so a match is remembered, per shard and
-- counts, for as long as this library's Lua state lives (as layout_seen),
-- and an add checks once (`once`), not on every call.
-- Recording counts (the shard's keys were removed) forgets every match
-- remembered, so a process of other counts is read again and refused, and
-- the counts topic_bucket and shard_index_count remembered of the shard.
local layout_matched = {} -- P -> '<buckets>:<shards>' known to match
local function layout_mismatch(nb, ns, once)
    if once and layout_matched[P] == nb .. ':' .. ns then return nil end
    local known = redis.call('MGET', P .. ':buckets', P .. ':shards')
    if not known[1] then
        redis.call('MSET', P .. ':buckets', nb, P .. ':shards', ns, layout_key(), num(LAYOUT))
        layout_matched = {[P] = nb .. ':' .. ns}
        bucket_counts[P], shard_place[P] = nil, nil -- read of the deployment before
        return nil
    end
    local known_shards = known[2] or '1' -- recorded before shards existed
    if tonumber(known[1]) == tonumber(nb) and tonumber(known_shards) == tonumber(ns) then
        layout_matched[P] = nb .. ':' .. ns
        return nil
    end
    return redis.error_reply('DQ_LAYOUT buckets ' .. known[1] .. ' shards ' .. known_shards)
end

-- Writes what the call gathered: sorted-set entries once per key, each
-- topic's counters, the deployment's totals, and which topics hold no job
-- any more (P:idle, so delayq-timer forgets them after topic_retention_s;
-- P:topics lists the topics that have counters). Then tells waiting
-- long-polls how many jobs each topic got ("<count>:<topic>", once per
-- topic per call; each worker process wakes that many of its waiters).
local function flush()
    write_zadds()
    local totals = {}
    for _, topic in ipairs(topic_order) do
        local sk = stats_key(topic)
        for field, by in pairs(counters[topic]) do
            if by ~= 0 then
                local now = redis.call('HINCRBY', sk, field, num(by))
                if field == 'jobs' then
                    if now == 0 then
                        redis.call('ZADD', P .. ':idle', num(now_ms()), topic)
                    elseif now == by then
                        redis.call('ZREM', P .. ':idle', topic)
                        redis.call('ZADD', P .. ':topics', '0', topic)
                    end
                else
                    totals[field] = (totals[field] or 0) + by
                end
            end
        end
    end
    for field, by in pairs(totals) do
        if by ~= 0 then redis.call('HINCRBY', P .. ':totals', field, num(by)) end
    end
    -- "<count>:<topic>", then a NUL byte and the message's id (see
    -- publish_ready), unique in the shard even when the sequence starts
    -- again (a Redis that lost its data: the time differs). The id
    -- lets the worker processes of one host share out the wake-ups
    -- (src/fcgi/wake_claims.h). A reader of the payload as a C string (an older
    -- process) sees "<count>:<topic>".
    for _, topic in ipairs(ready_order) do
        -- A paused topic's waiters could take nothing; resume tells them.
        if not paused(topic) then
            publish_ready(topic, ready_topics[topic])
        end
    end
    if push_ready > 0 then
        redis.call('SPUBLISH', P .. ':pushwake', num(push_ready))
    end
    -- A topic whose reserved jobs went down under a concurrency limit may
    -- have ready jobs that pop or push_take held back: its long-polls are
    -- told as for jobs made ready, and the pushers are woken, so they take
    -- them now rather than at their recheck.
    for _, topic in ipairs(topic_order) do
        local freed = -(counters[topic].reserved or 0)
        if freed > 0 and not paused(topic) and policy_of(topic).concurrency then
            -- (A topic that got ready jobs in this call was told above.)
            if not ready_topics[topic] and redis.call('EXISTS', ready_key(topic)) == 1 then
                publish_ready(topic, freed)
            end
            -- Push jobs push_take held back for the limit: as many as the
            -- room freed go back to P:push, oldest first, and the pushers
            -- are woken (push_take holds them again if others took the room).
            local back = unhold_oldest(topic, freed)
            if back > 0 then
                redis.call('SPUBLISH', P .. ':pushwake', num(back))
            end
        end
    end
end
