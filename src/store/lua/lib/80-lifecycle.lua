-- lib/80-lifecycle.lua: the job's life cycle, and the moves built on it.

-- ==========================================================================
-- The job's life cycle (docs/DESIGN.md, "The job's life cycle"), declared
-- once. A job is in one of LIFECYCLE.states (its head's s); an edge moves
-- it from one of its `from` states ('new': a job not stored yet) to `to`
-- (a state, or 'ended': its key is deleted), and runs the edge's hooks in
-- order: each is the bookkeeping of one feature (counters, deliveries, due
-- sets, queues, a key's room, kept records) that hangs on that edge.
-- transition() is the only code that moves a job, but for the due edge,
-- which the timer makes in bulk without reading the jobs (due_jobs_go,
-- and settle_state for its reading). scripts/check-lifecycle fails the
-- build on a write of the state anywhere else.
-- `make lifecycle-chart` draws DESIGN's chart from this table: keep one
-- edge a line.
-- ==========================================================================
-- A new job as the fields of f describe it: topic, body, ttr (ms),
-- retries (-1 unlimited), k (bucket) and due (ms; due <= now means ready
-- at once); optional backoff (JSON array of seconds), url and timeout (ms)
-- of a callback, key (the grouping key), traceparent and tracestate (its
-- trace context). In a topic that keeps history it also holds its due
-- time, for its record. It is in no state yet ('new'): the add edge puts
-- it in one, and stores it (create_job).
local function job_of_fields(f, now)
    local ready = f.due <= now
    local j = {state = 'new', topic = f.topic, ttr = tonumber(f.ttr), attempts = 0,
        retries = tonumber(f.retries), attempts_at_kick = 0, created = now, bucket = tonumber(f.k),
        due = ready and -1 or f.due, ready_at = ready and now or nil, body = f.body, whole = true,
        push = f.url ~= nil}
    if f.backoff then j.backoff = backoff_ms(f.backoff) end
    if f.url then j.url, j.timeout = f.url, tonumber(f.timeout) end
    j.key, j.traceparent, j.tracestate = f.key, f.traceparent, f.tracestate
    if keep_of(f.topic) > 0 then j.due_asked = f.due end -- for its record
    return j
end

-- The due edge, as a read sees it: a job whose head says delay but that
-- has left its topic's delay set was made ready by the move (due_jobs_go),
-- which writes no head: it is ready, and became so at its due time.
-- found_in: the state of the set the caller found it in ('ready',
-- 'delay'), which saves the look at the delay set. (A delay set entry
-- this call gathered is written first: a batch may name an id twice.)
settle_state = function(id, j, found_in)
    if j.state ~= 'delay' or found_in == 'delay' then return j end
    if found_in ~= 'ready' then
        local dk = Key.delay(j.topic, j.push)
        if zadds[dk] then write_zadds() end
        if redis.call('ZSCORE', dk, id) then return j end
    end
    j.state, j.ready_at, j.due = 'ready', j.due, -1
    return j
end

-- The due edge, in bulk: the timer's move of a delay set's due entries
-- (due, as ZRANGEBYSCORE WITHSCORES answered them, the set's lowest) to
-- its topic's ready queue, or P:push for callbacks. It reads no job and
-- writes no head (settle_state reads them as ready), so what leaving delay
-- and entering ready run it does once for all: the set's entries, one
-- sequence range, the queue, the counters. BULK_DUE_DOES names those
-- hooks; a hook added to LIFECYCLE.leaves.delay, enters.ready or every
-- fails the first move (due_bulk_checked) until it is done here too.
local BULK_DUE_DOES = 'leave_due_set|store,take_seq,enqueue|count_states'
local due_bulk_checked = false
local LIFECYCLE
local function due_jobs_go(key, topic, push, due)
    if not due_bulk_checked then
        local hooks = table.concat(LIFECYCLE.leaves.delay, ',') .. '|' ..
            table.concat(LIFECYCLE.enters.ready, ',') .. '|' .. table.concat(LIFECYCLE.every, ',')
        if hooks ~= BULK_DUE_DOES then
            error('lifecycle: due_jobs_go does ' .. BULK_DUE_DOES .. ' in bulk, not ' .. hooks)
        end
        due_bulk_checked = true
    end
    local n = #due / 2
    redis.call('ZREMRANGEBYRANK', key, '0', num(n - 1))
    local seq = reserve_seq(n)
    for i = 1, n do enqueue_ready(due[2 * i - 1], topic, seq + i - 1, push) end
    move_count(topic, 'delay', 'ready', n)
end

LIFECYCLE = {
    states = {'delay', 'ready', 'reserved', 'buried'},
    -- Each feature's bookkeeping hangs on what a move does, never on an
    -- edge or a command: every edge that leaves a state runs its `leaves`
    -- hooks, then the edge's own `hooks`, then the `enters` hooks of the
    -- state it goes to ('ended': the job ends), then `every`, then the
    -- edge's `after`. An edge that stays (touch: the job does not leave
    -- its state, only its deadline moves) runs its own hooks alone. So a
    -- new edge cannot skip a feature, and a new feature hooks once.
    leaves = {
        new = {},
        delay = {'leave_due_set'},
        ready = {'leave_ready'},
        reserved = {'leave_due_set', 'end_key_reservation'},
        buried = {'leave_buried', 'fresh_retries'},
    },
    enters = {
        delay = {'store', 'enter_due_set'},
        ready = {'store', 'take_seq', 'enqueue'},
        reserved = {'store', 'enter_due_set'},
        buried = {'store', 'take_seq', 'enter_buried'},
        ended = {'keep_record', 'keep_delivery_log', 'delete'},
    },
    every = {'count_states'},
    edges = {
        {name = 'add', from = {'new'}, to = 'delay', hooks = {}, after = {'note_born'}},
        {name = 'add_ready', from = {'new'}, to = 'ready', hooks = {}, after = {'note_born'}},
        {name = 'due', from = {'delay'}, to = 'ready', bulk = true, hooks = {}, after = {}},
        {name = 'reserve', from = {'ready'}, to = 'reserved', hooks = {'count_delivery'}, after = {'count_popped'}},
        {name = 'touch', from = {'reserved'}, to = 'reserved', stays = true, hooks = {'store', 'enter_due_set'}, after = {}},
        {name = 'give_back', from = {'reserved'}, to = 'ready', hooks = {'uncount_delivery'}, after = {'uncount_popped'}},
        {name = 'retry', from = {'reserved'}, to = 'ready', hooks = {'ready_since_now'}, after = {}},
        {name = 'release', from = {'reserved'}, to = 'delay', hooks = {}, after = {}},
        {name = 'bury', from = {'reserved'}, to = 'buried', hooks = {}, after = {}},
        {name = 'kick', from = {'buried'}, to = 'ready', hooks = {'ready_since_now'}, after = {'count_kicked'}},
        {name = 'reschedule', from = {'delay', 'ready', 'buried'}, to = 'delay', hooks = {'record_due'}, after = {}},
        {name = 'reschedule_now', from = {'delay', 'ready', 'buried'}, to = 'ready', hooks = {'record_due', 'ready_since_now'}, after = {}},
        {name = 'replace', from = {'delay', 'ready', 'buried'}, to = 'delay', before = {'write_zadds'}, hooks = {'renew'}, after = {}},
        {name = 'replace_ready', from = {'delay', 'ready', 'buried'}, to = 'ready', before = {'write_zadds'}, hooks = {'renew'}, after = {}},
        {name = 'finish', from = {'delay', 'ready', 'reserved', 'buried'}, to = 'ended', hooks = {}, after = {}},
        {name = 'delete', from = {'delay', 'ready', 'reserved', 'buried'}, to = 'ended', hooks = {}, after = {}},
    },
    -- The hooks, by name. Each is called as hook(id, j, at): j the job,
    -- already in its new state (j.state, and j.due: at.due while delay or
    -- reserved, else -1), at the edge's arguments (below), at.from the
    -- state it left.
    --   at.due      delay or reserved: when the timer looks at it again
    --   at.seq      its place in the queue it joins (else one is taken)
    --   at.now      the call's time (a delivery's, a new job's)
    --   at.asked    the due time asked for (a reschedule's, for the record)
    --   at.kind     an end's counter and outcome: 'finished' or 'deleted'
    --   at.fields   a replace's new definition (see job_of_fields)
    --   at.keep     how long an end's record is kept (ms; 0: none)
    --   at.batched  due set entries wait for flush() (see due_set_add)
    --   at.unlisted the caller took it out of the queue or set it leaves
    --               already (a pop, the move, a kick: in one command)
    --   at.if_new   a new job is written only where its id names none
    --   at.refused  set by store when at.if_new finds the id taken
    hooks = {
        -- the write of its head (and of the rest when j.whole); a new
        -- job's with at.if_new is a SET NX that refuses the edge (the
        -- first write of an add: nothing was written before it)
        store = function(id, j, at)
            if at.from == 'new' then
                at.refused = store_job(id, j, at.if_new)
            else
                store_job(id, j)
            end
        end,
        -- per-state counters (stats): a new job counts as added, an ended
        -- one as finished or deleted
        count_states = function(_, j, at)
            local from, to = at.from, j.state
            if from == to then return end
            if from == 'new' then
                count(j.topic, 'added', 1)
                count(j.topic, 'jobs', 1)
            else
                count(j.topic, from, -1)
            end
            if to == 'ended' then
                count(j.topic, at.kind, 1)
                count(j.topic, 'jobs', -1)
            else
                count(j.topic, to, 1)
            end
        end,
        count_popped = function(_, j) count(j.topic, 'popped', 1) end,
        uncount_popped = function(_, j) count(j.topic, 'popped', -1) end,
        count_kicked = function(_, j) count(j.topic, 'kicked', 1) end,
        -- created after a purge's first step in the same ms: kept by it
        note_born = function(id, j, at) note_if_born_in_purge(id, j.topic, at.now) end,
        -- deliveries (attempts) and retries
        count_delivery = function(_, j, at)
            j.attempts = j.attempts + 1
            note_delivery(j, at.now)
        end,
        uncount_delivery = function(_, j)
            j.attempts = j.attempts - 1
            if j.attempts == 0 and j.first_delivery then j.first_delivery, j.whole = nil, true end -- never delivered, after all
        end,
        -- a buried job comes back with a fresh allowance of retries
        fresh_retries = function(_, j) j.attempts_at_kick = j.attempts end,
        -- a kept record's due time (a topic that keeps history)
        record_due = function(_, j, at)
            if j.due_asked then j.due_asked, j.whole = at.asked, true end
        end,
        -- due sets: the delay sets, the buckets and reserved indexes
        enter_due_set = function(id, j, at) due_set_add(id, j, j.due, j.state, at.batched) end,
        leave_due_set = function(id, j, at)
            if not at.unlisted then due_set_remove(id, j, at.from) end
        end,
        -- queues: ready (or P:push), buried. A ready job that leaves other
        -- than by a pop passes its key's turn on (unlist).
        ready_since_now = function(_, j) j.ready_at = clock() end,
        enqueue = function(id, j, at) enqueue_ready(id, j.topic, at.seq, j.push) end,
        leave_ready = function(id, j, at)
            if not at.unlisted then
                unlist(id, j, 'ready')
            elseif j.push then
                redis.call('ZREM', Key.push_index(j.topic), id) -- popped from P:push
            end
        end,
        take_seq = function(_, _, at) at.seq = at.seq or reserve_seq(1) end,
        enter_buried = function(id, j, at)
            zadd(Key.buried(j.topic), num(at.seq), id)
            count(j.topic, 'buries', 1)
        end,
        leave_buried = function(id, j, at)
            if not at.unlisted then redis.call('ZREM', Key.buried(j.topic), id) end
        end,
        -- a replace: the call's batched set entries written first (a batch
        -- may name an id twice), then the job becomes the one at.fields
        -- describe, in place (see replace_job)
        write_zadds = function() write_zadds() end,
        renew = function(id, j, at)
            local f = at.fields
            local new = job_of_fields(f, at.now)
            new.created, new.legacy = j.created, j.legacy
            if not f.traceparent and not f.tracestate then new.traceparent, new.tracestate = j.traceparent, j.tracestate end
            if j.push and not new.push then redis.call('DEL', Key.delivery(id)) end
            for k in pairs(j) do
                if k ~= 'state' then j[k] = nil end
            end
            for k, v in pairs(new) do
                if k ~= 'state' then j[k] = v end
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
                redis.call('PEXPIRE', Key.delivery(id), num(at.keep))
            else
                redis.call('DEL', Key.delivery(id))
            end
        end,
        delete = function(id, j) delete_job(id, j) end,
        -- per-key limits: the key's room (key_reservation_ends); back to
        -- ready, the job takes the room it frees, at the caller's place,
        -- else the one it had when taken (else take_seq gives a new one)
        end_key_reservation = function(id, j, at)
            local kept = key_reservation_ends(id, j.topic, j.state == 'ready')
            if j.state == 'ready' then at.seq = at.seq or kept end
        end,
    },
}

-- The hooks an edge runs, in order (see LIFECYCLE): made once per edge.
local function edge_hooks(e)
    local from_to, list = {}, {}
    local function add(names)
        for _, h in ipairs(names or {}) do list[#list + 1] = LIFECYCLE.hooks[h] end
    end
    for _, s in ipairs(e.from) do
        list = {}
        add(e.before)
        if e.stays then
            add(e.hooks)
        else
            add(LIFECYCLE.leaves[s])
            add(e.hooks)
            add(LIFECYCLE.enters[e.to])
            add(LIFECYCLE.every)
        end
        add(e.after)
        from_to[s] = list
    end
    return from_to
end

-- Moves job j along `edge` (a name in LIFECYCLE.edges) with its arguments
-- `at` (see the hooks); returns its new state, or nil and the job there
-- when the store refused a new job (at.if_new). A job not in one of the
-- edge's from states is a bug of the caller: an error, before any write.
local function transition(id, j, edge, at)
    local edges = LIFECYCLE.edges
    if not edges.by_name then
        -- made on the first call: the library's load runs no loops (Redis
        -- gives it no ipairs); the table never changes after
        local by_name = {}
        for _, e in ipairs(edges) do
            e.runs = edge_hooks(e)
            by_name[e.name] = e
        end
        edges.by_name = by_name
    end
    local e = edges.by_name[edge]
    if not e then error('lifecycle: no edge ' .. tostring(edge)) end
    if e.bulk then error('lifecycle: ' .. edge .. ' runs in bulk (due_jobs_go)') end
    local hooks = e.runs[j.state]
    if not hooks then error('lifecycle: ' .. edge .. ' from ' .. tostring(j.state)) end
    at = at or {}
    at.from = j.state
    j.state = e.to
    if e.to == 'delay' or e.to == 'reserved' then j.due = at.due else j.due = -1 end
    for _, hook in ipairs(hooks) do
        hook(id, j, at)
        if at.refused then -- only the first write may refuse (store, if_new)
            j.state = at.from
            return nil, at.refused
        end
    end
    return j.state
end

-- Creates job `id` from the fields of f (see job_of_fields); a job ready
-- at once takes sequence number seq (else one is taken). Returns its
-- state ('ready' or 'delay'). if_new: the caller has not looked whether
-- the id is taken, and the job is written only where it is not (one SET
-- NX GET, so an add reads nothing before it writes): else nothing is
-- written, and it returns nil and the job there, as load_job answers it.
local function create_job(id, f, now, seq, if_new)
    local j = job_of_fields(f, now)
    local edge = f.due <= now and 'add_ready' or 'add'
    return transition(id, j, edge, {now = now, seq = seq, due = f.due, batched = true, if_new = if_new})
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
    local keep = not no_record and keep_of(j.topic) or 0
    -- the record takes fields of the tail a head-only read left out
    if keep > 0 and j.head_only then j = load_job(id) end
    transition(id, j, kind == 'finished' and 'finish' or 'delete', {kind = kind, keep = keep})
end

-- Removes the jobs named by argv[from..to], each in its own right: one item
-- per id, 'ok' or 'DQ_NOT_FOUND' (no such job, or not the caller's topic:
-- the two answer alike, so a token limited to topics cannot learn which
-- other ids exist). limit_topics() must have run.
local function remove_ids(ids, kind)
    local out = {}
    for _, id in ipairs(ids) do
        local j = load_job(id, true) -- removing needs only the head
        if not j or not allowed(j.topic) then
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
    if retries_spent(j.attempts, j.retries, j.attempts_at_kick) then
        return transition(id, j, 'bury', {unlisted = unlisted})
    end
    local delay = 0
    -- steps count from the latest kick, as retries do (kb)
    if j.backoff then delay = backoff_step(j.backoff, j.attempts - j.attempts_at_kick) end
    if wait then -- a busy receiver: never sooner than BUSY_WAIT_MIN_MS
        if j.backoff then wait = math.min(wait, backoff_step(j.backoff, 1e9)) end
        delay = math.max(wait, BUSY_WAIT_MIN_MS)
    end
    if delay <= 0 then
        -- Under a key limit the job goes back to its place, before its
        -- key's later jobs (a serial key keeps its due order).
        return transition(id, j, 'retry', {unlisted = unlisted})
    end
    return transition(id, j, 'release', {due = now + delay, unlisted = unlisted})
end

