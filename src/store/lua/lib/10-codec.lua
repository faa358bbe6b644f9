-- src/store/lua/lib/: what every delayq function shares, in modules by
-- concern (10-codec.lua, this one, to 99-flush.lua): key names, Redis'
-- clock, the job codec, the life cycle, the per-topic counters, and the
-- per-call bookkeeping that flush() writes once at the end of a call.
-- embed.sh puts them first in the library, in file order, as one chunk:
-- a module uses what the ones before it define.
--
-- 10-codec.lua: the job codec (a job key's layout; reading, writing and
-- deleting a job) and the call's batched set entries.
--
-- src/store/lua/embed.sh builds one Redis Functions library from these files
-- and the other .lua files: each of them becomes the body of a function that
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
-- The names of the shard's keys, each Key.<what>(...) (most in
-- 20-keys.lua): one table, not one local each, so the modules stay well
-- within Lua's 200 locals of one chunk.
local Key = {}

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Numbers go to redis.call as strings: Redis formats a Lua number with
-- %.17g, which costs more than the command it is an argument of.
local function num(x)
    return string.format('%d', x)
end

function Key.job(id) return P .. ':j:' .. id end
-- The body key of a job of the older layout (a hash at P:j:<id>).
function Key.legacy_body(id) return P .. ':v:' .. id end

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
function Key.delay(topic, push) return P .. ':' .. delay_set_name(topic, push) end

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
local MORE_FIELDS = {'backoff', 'url', 'timeout', 'last_attempt_at', 'last_status', 'last_error',
    'key', 'traceparent', 'tracestate', 'due_asked', 'first_delivery'}
-- A job's fields by the short names of its stored forms (the comment at
-- the top; the older layout's hash fields) -> their names in code: the
-- one place the two meet.
local FIELD_NAME = {s = 'state', d = 'due', rt = 'ready_at', n = 'attempts', kb = 'attempts_at_kick',
    r = 'retries', ttr = 'ttr', c = 'created', k = 'bucket', t = 'topic', bo = 'backoff', u = 'url',
    to = 'timeout', la = 'last_attempt_at', ls = 'last_status', le = 'last_error', g = 'key',
    tp = 'traceparent', ts = 'tracestate', du = 'due_asked', fd = 'first_delivery'}
-- The fields an older-layout hash holds as decimal text.
local NUMERIC_FIELD = {ttr = true, n = true, r = true, kb = true, c = true, k = true, d = true, rt = true,
    to = true, la = true}

-- A job of the older layout: its hash and body key, as load_job answers.
local function load_legacy_job(id)
    local h = redis.call('HGETALL', Key.job(id))
    if #h == 0 then return nil end
    local j = {whole = true} -- its next write is the whole key, in this layout
    for i = 1, #h, 2 do
        local f, x = h[i], h[i + 1]
        if NUMERIC_FIELD[f] then x = tonumber(x) end
        j[FIELD_NAME[f] or f] = x
    end
    j.push = j.url ~= nil
    j.legacy = true
    j.body = redis.call('GET', Key.legacy_body(id)) or ''
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

-- The due edge's reading of a head (defined with the life cycle, below).
local settle_state

-- Job `id` as a table of its fields (nil where it has none; numbers as
-- numbers; push: it has a callback URL), or nil. head_only: read the head
-- and the topic only (for a move, a removal, a conflict check), so the
-- fields only some jobs have (j.more: it has them) and the body are not
-- read. The body is job_body(j), sliced when asked for. value: the job's
-- stored value, read already (false: there is none), so it is not read.
-- Its state is as stored: load_job, below, is what functions call.
local function read_job(id, head_only, value)
    local jk = Key.job(id)
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
    local j = {state = STATE_NAME[s], due = d, attempts = n, attempts_at_kick = kb, retries = r, ttr = ttr,
        created = c, bucket = k,
        more = more > 0, push = more == 3, raw = v, head_only = head_only and more > 0}
    if rt >= 0 then j.ready_at = rt end
    j.topic = string.sub(v, at, at + tlen - 1)
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
        redis.call('SETRANGE', Key.job(id), '0', struct.pack(STATE_HEAD, STATE_CODE[j.state], j.due, j.ready_at or -1, j.attempts, j.attempts_at_kick))
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
        more = j.url and 3 or 1
        tail = cmsgpack.pack(x)
    end
    local v = struct.pack(HEAD, STATE_CODE[j.state], j.due, j.ready_at or -1, j.attempts, j.attempts_at_kick, j.retries, j.ttr, j.created, j.bucket,
        more, #j.topic) .. j.topic .. tail .. job_body(j)
    if if_new then
        local old = redis.pcall('SET', Key.job(id), v, 'NX', 'GET')
        if type(old) == 'table' and not (old.err and string.find(old.err, 'WRONGTYPE', 1, true)) then
            error(old)
        end
        j.whole = nil
        return load_job(id, false, old) -- (a table: WRONGTYPE, a job of the older layout)
    end
    redis.call('SET', Key.job(id), v)
    if j.legacy then
        redis.call('DEL', Key.legacy_body(id))
        j.legacy = nil
    end
    j.whole = nil
end

-- Deletes job `id` (j: as load_job answered it).
local function delete_job(id, j)
    if j.legacy then
        redis.call('DEL', Key.job(id), Key.legacy_body(id))
    else
        redis.call('DEL', Key.job(id))
    end
end

