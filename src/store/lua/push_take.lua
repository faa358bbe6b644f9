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
-- call that frees room wakes the pushers), and so is one whose `rate` has
-- no token left: the topic goes in P:rh, scored by when its next token is
-- due, and the first call after that puts as many of its held jobs back
-- as it has tokens for. A job whose key is at its `key_concurrency` goes
-- to its key's lane (key_admits in lib/60-limits.lua), and back when the key has
-- room. At most limit + 1000 entries of P:push are looked at per call.
-- KEYS: P.
-- argv: limit:int grace_ms:int
-- reply: token_wait_ms
-- reply job: id topic body url attempt timeout_ms key traceparent tracestate
-- token_wait_ms: -1, or the ms until the earliest token due of a topic
-- whose jobs wait for their `rate` (the pusher calls again then); a `job`
-- per job taken follows.
local call = args()
local want, grace = call.limit, call.grace_ms
local now = clock() -- the call's one reading of Redis' time
local out = {}
local hold_head = {} -- topic -> lowest score left in its hold (false: empty)
local drain = 1000   -- held jobs this call may still move back
local tokens_left = {} -- topic -> tokens this call may still spend (false: no rate)
local spent, spent_order = {}, {} -- topic -> tokens this call spent; the topics in order
-- topics held for their rate in this call (a set, and its order, so the
-- writes below come in a fixed order)
local rate_waiting, rate_waiting_order = {}, {}
local function wait_for_rate(topic)
    if not rate_waiting[topic] then
        rate_waiting[topic] = true
        rate_waiting_order[#rate_waiting_order + 1] = topic
    end
end
local token_wait = -1
local function note_wait(ms)
    if token_wait < 0 or ms < token_wait then token_wait = math.max(0, ms) end
end

-- Topics held for their rate whose next token is due: as many of their
-- held jobs go back to P:push as they have tokens for (all, up to the
-- drain, when the rate is gone); a topic that keeps some held is entered
-- again below. The others' next token tells when to call again.
local rh = redis.call('ZRANGE', Key.rate_held(), '0', '-1', 'WITHSCORES')
for i = 1, #rh, 2 do
    local topic, due = rh[i], tonumber(rh[i + 1])
    if due <= now then
        redis.call('ZREM', Key.rate_held(), topic)
        if not paused(topic) then -- a paused topic's wait for its resume
            local room = rate_room(topic, now)
            local back = unhold_oldest(topic, math.min(room or drain, drain))
            drain = drain - back
            if redis.call('EXISTS', Key.hold(topic)) == 1 then wait_for_rate(topic) end
        end
    else
        note_wait(due - now)
    end
end
-- Moves up to `drain` of a resumed topic's oldest held jobs back to P:push
-- (the next ZPOPMIN meets them first), and no more than `most` (the tokens
-- of a rate-limited topic: the others would only be held again); returns
-- the lowest score left held.
local function unhold(topic, most)
    local hk = Key.hold(topic)
    drain = drain - unhold_oldest(topic, math.min(drain, most or drain))
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
    -- A topic whose `rate` has no token left: held the same way, until
    -- its next token (P:rh).
    local left = tokens_left[topic]
    if left == nil then
        left = rate_room(topic, now) or false
        tokens_left[topic] = left
    end
    if left and left <= 0 then
        wait_for_rate(topic)
        return true
    end
    local head = hold_head[topic]
    if head == nil then
        head = unhold(topic, left or nil)
        hold_head[topic] = head
    end
    return head and tonumber(score) > head
end
lanes_drain_step()
local looked, budget = 0, want + 1000
while #out < want and looked < budget do
    local taken = redis.call('ZPOPMIN', Key.push(), num(math.min(want - #out, budget - looked)))
    if #taken == 0 then break end
    for i = 1, #taken, 2 do
        looked = looked + 1
        local id = taken[i]
        local j = load_job(id, false, nil, 'ready')
        local topic = j.topic
        if held_back(topic, taken[i + 1]) then
            redis.call('ZADD', Key.hold(topic), taken[i + 1], id)
        elseif key_admits(id, j, taken[i + 1]) then -- else set aside in its key's lane
            transition(id, j, 'reserve', {due = now + j.timeout + grace, now = now, unlisted = true})
            if tokens_left[topic] then
                tokens_left[topic] = tokens_left[topic] - 1
                if not spent[topic] then spent_order[#spent_order + 1] = topic end
                spent[topic] = (spent[topic] or 0) + 1
            end
            out[#out + 1] = reply_job{id = id, topic = topic, body = job_body(j), url = j.url,
                attempt = j.attempts, timeout_ms = j.timeout, key = j.key or false, traceparent = j.traceparent or false,
                tracestate = j.tracestate or false}
        end
    end
end
for _, topic in ipairs(spent_order) do spend_tokens(topic, spent[topic], now) end
-- Each topic held for its rate is looked at again when its next token is
-- due, so no job stays held for want of a caller.
for _, topic in ipairs(rate_waiting_order) do
    local _, wait = rate_room(topic, now)
    if wait then
        wait = math.max(wait, 1)
        redis.call('ZADD', Key.rate_held(), num(now + wait), topic)
        note_wait(wait)
    end
end
local result = reply{token_wait_ms = token_wait}
for _, job in ipairs(out) do result[#result + 1] = job end
return result
