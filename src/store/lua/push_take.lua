-- push_take: delayq-push reserves up to `limit` ready push jobs of this
-- shard, oldest first. Each becomes reserved until now + its callback
-- timeout + grace_ms: if the pusher dies, the timer's move treats the
-- passed deadline as a failed delivery, so the job comes back.
-- A job of a paused topic moves to the topic's hold set (P:ph:<topic>)
-- with its score, so it waits without blocking other topics' jobs; resume
-- puts it back. While a hold of a topic that is not paused is not empty (a
-- resume under way, or one whose caller died half-way), push_take moves
-- its oldest back itself (at most 1000 a call in all) and a job of that
-- topic newer than what stays held goes to the hold too, so the topic's
-- jobs keep their order and never wait on an abandoned hold. A topic under
-- a `concurrency` limit with no room left is held back the same way (the
-- call that frees room wakes the pushers). A job whose key is at its
-- `key_concurrency` goes to its key's lane (key_admits in common.lua), and
-- back when the key has room. At most limit + 1000 entries of P:push are
-- looked at per call.
-- KEYS: P.
-- argv: limit grace_ms
-- reply job: id topic body url attempt timeout_ms key traceparent tracestate
-- Returns a list of `job`.
local want, grace = tonumber(ARGV[ARG.limit]), tonumber(ARGV[ARG.grace_ms])
local now = now_ms()
local out = {}
local hold_head = {} -- topic -> lowest score left in its hold (false: empty)
local drain = 1000   -- held jobs this call may still move back
-- Moves up to `drain` of a resumed topic's oldest held jobs back to P:push
-- (the next ZPOPMIN meets them first); returns the lowest score left held.
local function unhold(topic)
    local hk = hold_key(topic)
    drain = drain - unhold_oldest(topic, drain)
    local first = redis.call('ZRANGE', hk, 0, 0, 'WITHSCORES')
    return first[2] and tonumber(first[2]) or false
end
local function held_back(topic, score)
    if paused(topic) then return true end
    -- A topic whose `concurrency` has no room left: its jobs wait in the
    -- hold like a paused topic's, so they block no other topic; they go
    -- back (below) once a call finds room again.
    local room = concurrency_room(topic)
    if room and room <= 0 then return true end
    local head = hold_head[topic]
    if head == nil then
        head = unhold(topic)
        hold_head[topic] = head
    end
    return head and tonumber(score) > head
end
lanes_drain_step()
local looked, budget = 0, want + 1000
while #out < want and looked < budget do
    local taken = redis.call('ZPOPMIN', push_key(), num(math.min(want - #out, budget - looked)))
    if #taken == 0 then break end
    for i = 1, #taken, 2 do
        looked = looked + 1
        local id = taken[i]
        local j = load_job(id)
        local topic = j.t
        if held_back(topic, taken[i + 1]) then
            redis.call('ZADD', hold_key(topic), taken[i + 1], id)
        elseif key_admits(id, j, taken[i + 1]) then -- else set aside in its key's lane
            local deadline = now + j.to + grace
            j.s, j.n, j.d = 'reserved', j.n + 1, deadline
            note_delivery(j, now)
            store_job(id, j)
            redis.call('ZREM', push_index(topic), id)
            bucket_add(id, j.k, deadline, topic, 'reserved')
            move_count(topic, 'ready', 'reserved')
            count(topic, 'popped', 1)
            out[#out + 1] = reply_job{id = id, topic = topic, body = job_body(j), url = j.u,
                attempt = j.n, timeout_ms = j.to, key = j.g or false, traceparent = j.tp or false,
                tracestate = j.ts or false}
        end
    end
end
return out
