-- give_back: reservations a push take made that no client will use,
-- because the caller cannot hand the jobs on (delayq-push: a job that
-- waited for a connection to its host past push_grace_ms, or whose time
-- ran out unsent while the pusher waited on Redis). Each job
-- still reserved for that delivery is ready again at once, at the head of
-- its queue (it was there when taken), its delivery not counted: a Redis
-- hiccup costs no job a retry or its place in the backoff schedule.
-- KEYS: P.
-- argv job: id attempt
-- The arguments are a `job` per job: its id and the delivery it was
-- reserved for.
-- Returns how many were given back.
local back = 0
for i = 1, #ARGV, ARG_JOB_FIELDS do
    local id = ARGV[i + ARG_JOB.id]
    local j = load_job(id)
    if j and j.s == 'reserved' and j.n == tonumber(ARGV[i + ARG_JOB.attempt]) then
        local queue = j.push and push_key() or ready_key(j.t)
        local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
        local seq = head[2] and tonumber(head[2]) - 1 or reserve_seq(1)
        due_set_remove(id, j, 'reserved')
        key_reservation_ends(id, j.t, true) -- it is back at the head: it takes the room
        j.s, j.d, j.n = 'ready', -1, j.n - 1 -- rt stays: ready since then
        if j.n == 0 and j.fd then j.fd, j.whole = nil, true end -- never delivered, after all
        store_job(id, j)
        enqueue_ready(id, j.t, seq, j.push)
        move_count(j.t, 'reserved', 'ready')
        count(j.t, 'popped', -1)
        back = back + 1
    end
end
return back
