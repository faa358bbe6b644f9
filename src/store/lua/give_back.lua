-- give_back: reservations a push take made that no client will use,
-- because the caller cannot hand the jobs on (delayq-push: a job that
-- waited for a connection to its host past push_grace_ms, or whose time
-- ran out unsent while the pusher waited on Redis). Each job
-- still reserved for that delivery is ready again at once, at the head of
-- its queue (it was there when taken), its delivery not counted: a Redis
-- hiccup costs no job a retry or its place in the backoff schedule.
-- KEYS: P.
-- argv job: id attempt:int
-- The arguments are a `job` per job: its id and the delivery it was
-- reserved for.
-- Returns how many were given back.
local back = 0
for i = 1, #ARGV, ARG_JOB_FIELDS do
    local job = args_job(i)
    local id = job.id
    local j = load_job(id)
    if j and j.state == 'reserved' and j.attempts == job.attempt then
        local queue = j.push and Key.push() or Key.ready(j.topic)
        local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
        local seq = head[2] and tonumber(head[2]) - 1 or reserve_seq(1)
        -- back at the head, it takes its key's room; rt stays: ready since then
        transition(id, j, 'give_back', {seq = seq})
        back = back + 1
    end
end
return back
