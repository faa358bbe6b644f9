-- kick_ids: named buried jobs become ready (push jobs go back to P:push),
-- each with a fresh allowance of retries, as kick gives.
-- KEYS: P. ARGV: allow, id1, id2, ...
-- Returns one item per id: 'ok', 'DQ_CONFLICT <state>' when the job is not
-- buried, or 'DQ_NOT_FOUND' (no such job, or not the caller's topic).
limit_topics(ARGV[1])
local out = {}
local seq
for i = 2, #ARGV do
    local id = ARGV[i]
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 's', 't', 'n', 'u')
    if not j[1] or not allowed(j[2]) then
        out[#out + 1] = 'DQ_NOT_FOUND'
    elseif j[1] ~= 'buried' then
        out[#out + 1] = 'DQ_CONFLICT ' .. j[1]
    else
        local topic = j[2]
        if not seq then seq = reserve_seq(#ARGV - i + 1) else seq = seq + 1 end
        redis.call('ZREM', buried_key(topic), id)
        redis.call('HSET', jk, 'kb', j[3], 's', 'ready', 'd', '-1')
        enqueue_ready(id, topic, seq, j[4])
        move_count(topic, 'buried', 'ready')
        count(topic, 'kicked', 1)
        out[#out + 1] = 'ok'
    end
end
return out
