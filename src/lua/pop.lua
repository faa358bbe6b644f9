-- pop: reserves up to `count` ready jobs, taking from the topics in order.
-- ARGV: P, count, topic1, topic2, ...
-- Returns a list of {id, topic, body, attempts, ttr_ms}.
local want = tonumber(ARGV[2])
local now = now_ms()
local out = {}
local body_keys = {} -- read with one MGET at the end
local skipped = 0
local MAX_SKIPPED = 10000 -- bounds one call's work over stale entries

for ti = 3, #ARGV do
    local topic = ARGV[ti]
    local rk = ready_key(topic)
    while #out < want and skipped < MAX_SKIPPED do
        local e = redis.call('LPOP', rk)
        if not e then break end
        local g, id = split_entry(e)
        local jk = job_key(id)
        local j = redis.call('HMGET', jk, 's', 'g', 'n', 'ttr', 'k')
        if j[1] == 'ready' and j[2] == g then
            local n = tonumber(j[3]) + 1
            local due = now + tonumber(j[4])
            redis.call('HSET', jk, 's', 'reserved', 'n', num(n), 'd', num(due))
            schedule(id, j[5], due)
            move_count(topic, 'ready', 'reserved')
            count(topic, 'popped', 1)
            out[#out + 1] = {id, topic, false, n, tonumber(j[4])}
            body_keys[#out] = body_key(id)
        else
            skipped = skipped + 1
        end
    end
    if #out >= want then break end
end
if #out > 0 then
    local bodies = redis.call('MGET', unpack(body_keys))
    for i, job in ipairs(out) do job[3] = bodies[i] end
end
flush()
return out
