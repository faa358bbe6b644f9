-- push_take: delayq-push reserves up to `limit` ready push jobs of this
-- shard, oldest first. Each becomes reserved until now + its callback
-- timeout + grace_ms: if the pusher dies, the timer's move treats the
-- passed deadline as a failed delivery, so the job comes back.
-- KEYS: P. ARGV: limit, grace_ms.
-- Returns a list of {id, topic, body, url, attempt, timeout_ms}.
local want, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local taken = redis.call('ZPOPMIN', push_key(), num(want))
local out = {}
for i = 1, #taken, 2 do
    local id = taken[i]
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 'n', 't', 'u', 'to', 'k')
    local n = tonumber(j[1]) + 1
    local deadline = now + tonumber(j[4]) + grace
    redis.call('HSET', jk, 's', 'reserved', 'n', num(n), 'd', num(deadline))
    redis.call('ZREM', push_index(j[2]), id)
    schedule(id, j[5], deadline, j[2], 'reserved')
    move_count(j[2], 'ready', 'reserved')
    count(j[2], 'popped', 1)
    out[#out + 1] = {id, j[2], redis.call('GET', body_key(id)), j[3], n, tonumber(j[4])}
end
return out
