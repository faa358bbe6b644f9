-- add: adds one or more jobs.
-- KEYS: P. ARGV: allow, buckets, njobs, then per job: id, topic, body,
--       ttr_ms, retries, delay_ms, at_ms (-1: none), bucket.
-- Returns one item per job: 'ok', or 'DQ_CONFLICT <state>' when the id is
-- live ('DQ_CONFLICT' alone when the caller may not see that job's topic).
-- Errors (nothing written): DQ_BUCKETS <known> when the deployment uses
-- another bucket count; DQ_AT_RANGE <index> when a job's `at` is more than
-- ten years after Redis' clock.
limit_topics(ARGV[1])
if not buckets_match(ARGV[2]) then
    return redis.error_reply('DQ_BUCKETS ' .. redis.call('GET', P .. ':buckets'))
end
local njobs = tonumber(ARGV[3])
local now = now_ms()
local FIELDS = 8

for i = 0, njobs - 1 do
    local at = tonumber(ARGV[4 + i * FIELDS + 6])
    if at >= 0 and at - now > TEN_YEARS_MS then
        return redis.error_reply('DQ_AT_RANGE ' .. i)
    end
end

local out = {}
local snow = num(now)
local seq -- taken on the first job that is ready at once
local nseq = 0
for i = 0, njobs - 1 do
    local a = 4 + i * FIELDS
    local id, topic, body = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    local ttr, retries, delay, at, k = ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5]),
        tonumber(ARGV[a + 6]), ARGV[a + 7]
    local jk = job_key(id)
    local live = redis.call('HMGET', jk, 's', 't')
    if live[1] then
        out[#out + 1] = allowed(live[2]) and ('DQ_CONFLICT ' .. live[1]) or 'DQ_CONFLICT'
    else
        local due = now + delay
        if at >= 0 then due = math.max(at, now) end
        local ready = due <= now
        -- One HSET per job: the state fields go in with the rest.
        redis.call('HSET', jk, 't', topic, 'ttr', ttr, 'n', '0', 'r', retries, 'kb', '0',
            'c', snow, 'k', k, 's', ready and 'ready' or 'delay', 'd', ready and '-1' or num(due))
        redis.call('SET', body_key(id), body)
        if ready then
            if not seq then seq = reserve_seq(njobs - i) end
            enqueue_ready(id, topic, seq + nseq)
            nseq = nseq + 1
            count(topic, 'ready', 1)
        else
            schedule(id, k, due)
            count(topic, 'delay', 1)
        end
        count(topic, 'added', 1)
        count(topic, 'jobs', 1)
        out[#out + 1] = 'ok'
    end
end
return out
