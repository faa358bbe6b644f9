-- lib/99-flush.lua: flush: what a call gathered, written once at its end.

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
        local sk = Key.stats(topic)
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
            if not ready_topics[topic] and redis.call('EXISTS', Key.ready(topic)) == 1 then
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
