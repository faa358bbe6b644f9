-- lib/40-queues.lua: ready queues: sequence numbers, and the wake-ups of long-polls.

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
        zadd(Key.push(), num(seq), id)
        zadd(Key.push_index(topic), num(seq), id)
        push_ready = push_ready + 1
        return
    end
    zadd(Key.ready(topic), num(seq), id)
    note_ready(topic)
end

