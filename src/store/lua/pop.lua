-- pop: finishes the jobs a consumer is done with (finish-and-pop), then
-- reserves up to `count` ready jobs, taking from the topics in order (a
-- paused topic gives none, and a topic under a `concurrency` or `rate`
-- limit no more than this shard's share of it allows: its other jobs stay
-- ready; a job taken spends one of the topic's tokens, an empty pop none;
-- a job whose key is at its `key_concurrency` is set aside in its key's
-- lane and the pop goes on to the next: see key_admits in lib/60-limits.lua).
-- KEYS: P.
-- argv: allow:text count:int finish:text... topics:text...
-- reply: finished token_wait_ms
-- reply job: id topic body attempts ttr_ms key traceparent tracestate
-- finish: the ids to finish first. finished holds their
-- finish items (see remove_ids); token_wait_ms is -1, or, when a topic's
-- `rate` held back ready jobs the pop could have taken, the ms until that
-- topic's next token is due (a long-poll that got nothing waits that
-- long at most); a `job` per job taken follows.
local call = args()
limit_topics(call.allow)
local want = call.count
local finished = remove_ids(call.finish, 'finished')
local now = clock() -- the call's one reading of Redis' time
local out = {}
local token_wait = -1

for _, topic in ipairs(call.topics) do
    if key_limited(topic) then
        lanes_drain_step()
        break
    end
end
-- Jobs set aside for their key's limits (key_admits) do not count against
-- the count asked for; at most LANE_STEP of them per call.
local aside_left = LANE_STEP
for _, topic in ipairs(call.topics) do
    local n = want - #out
    local room = concurrency_room(topic)
    if room and room < n then n = room end
    local tokens, wait = rate_room(topic, now)
    if tokens and tokens < n then
        if tokens < 1 and n > 0 and not paused(topic) and
            redis.call('ZCARD', Key.ready(topic)) > 0 then
            -- held back by the rate: the long-poll waits for the token
            if token_wait < 0 or wait < token_wait then token_wait = wait end
        end
        n = tokens
    end
    local looked, budget = 0, n + aside_left
    local got = 0
    while n > got and looked < budget and not paused(topic) do
        local ask = math.min(n - got, budget - looked)
        local requeued = ready_topics[topic] or 0
        local taken = redis.call('ZPOPMIN', Key.ready(topic), num(ask))
        for i = 1, #taken, 2 do
            looked = looked + 1
            local id = taken[i]
            local j = load_job(id, false, nil, 'ready')
            if key_admits(id, j, taken[i + 1]) then
                got = got + 1
                transition(id, j, 'reserve', {due = now + j.ttr, now = now, batched = true, unlisted = true})
                out[#out + 1] = reply_job{id = id, topic = topic, body = job_body(j), attempts = j.attempts,
                    ttr_ms = j.ttr, key = j.key or false, traceparent = j.traceparent or false,
                    tracestate = j.tracestate or false}
            end
        end
        -- The queue ran dry, unless a job set aside let an older one of its
        -- key back into it (key_admits): that one may be taken now.
        if #taken < 2 * ask and (ready_topics[topic] or 0) == requeued then break end
    end
    if tokens then spend_tokens(topic, got, now) end -- only jobs delivered
    aside_left = aside_left - (looked - got)
    if looked >= budget and got < n then
        -- The step ended among jobs set aside: those behind may be
        -- eligible, so the topic's long-polls (this one too) look again.
        if redis.call('EXISTS', Key.ready(topic)) == 1 then publish_ready(topic, 1) end
    end
    if #out >= want then break end
end
local result = reply{finished = finished, token_wait_ms = token_wait}
for _, job in ipairs(out) do result[#result + 1] = job end
return result
