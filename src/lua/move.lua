-- move: the timer's step for one bucket. Due delayed jobs become ready;
-- reserved jobs past their TTR deadline are redelivered: at once, or after
-- their backoff step, or buried when their retries are spent.
-- KEYS: P. ARGV: bucket, limit.
-- Returns {moved, earliest remaining due ms or -1, Redis now ms}.
local k, limit = ARGV[1], tonumber(ARGV[2])
local bk = bucket_key(k)
local now = now_ms()
local ids = redis.call('ZRANGEBYSCORE', bk, '-inf', num(now), 'LIMIT', '0', num(limit))
if #ids > 0 then
    -- The ids are the bucket's lowest-ranked entries, so rank removal is exact.
    redis.call('ZREMRANGEBYRANK', bk, '0', num(#ids - 1))
    local seq = reserve_seq(#ids)
    for i, id in ipairs(ids) do
        local j = redis.call('HMGET', job_key(id), 's', 't', 'n', 'r', 'kb', 'u', 'bo')
        local state, topic = j[1], j[2]
        unindex(id, topic, state)
        if state == 'delay' then
            make_ready(id, topic, seq + i - 1, j[6])
            move_count(topic, 'delay', 'ready')
        elseif state == 'reserved' then
            if after_failure(id, {topic, k, j[3], j[4], j[5], j[6], j[7]}, now) ~= 'buried' then
                count(topic, 'redelivered', 1)
            end
        end
        -- A bucket entry is removed with its job, so no other state occurs.
    end
end
local head = redis.call('ZRANGE', bk, 0, 0, 'WITHSCORES')
local earliest = -1
if head[2] then earliest = tonumber(head[2]) end
return {#ids, earliest, now}
