-- add: adds one or more jobs.
-- KEYS: P (the jobs' shard). ARGV: allow, buckets, shards, njobs, then per
--       job: id, topic, body, ttr_ms, retries, delay_ms, at_ms (-1: none),
--       bucket. (`at` is checked against ten years by the caller.)
-- Returns one item per job: 'ok', or 'DQ_CONFLICT <state>' when the id is
-- live ('DQ_CONFLICT' alone when the caller may not see that job's topic).
-- Error (nothing written): DQ_LAYOUT when the deployment uses other bucket
-- or shard counts.
limit_topics(ARGV[1])
local mismatch = layout_mismatch(ARGV[2], ARGV[3])
if mismatch then return mismatch end
local njobs = tonumber(ARGV[4])
local now = now_ms()
local FIELDS = 8

local out = {}
local snow = num(now)
local seq -- taken on the first job that is ready at once
local nseq = 0
for i = 0, njobs - 1 do
    local a = 5 + i * FIELDS
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
