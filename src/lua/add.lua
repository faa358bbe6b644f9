-- add: adds one or more jobs.
-- ARGV: P, buckets, njobs, then per job: id, topic, body, ttr_ms, retries, delay_ms,
--       at_ms (-1: none), bucket.
-- Returns {'buckets_mismatch'} if the deployment uses another bucket count,
-- {'at_range', index} if any job's `at` is more than ten years away
-- (nothing written), else one entry per job: 'ok' or 'conflict:<state>'.
if not buckets_match(ARGV[2]) then return {'buckets_mismatch'} end
local njobs = tonumber(ARGV[3])
local now = now_ms()
local FIELDS = 8

for i = 0, njobs - 1 do
    local at = tonumber(ARGV[4 + i * FIELDS + 6])
    if at >= 0 and at - now > TEN_YEARS_MS then
        return {'at_range', i}
    end
end

local out = {}
local snow = num(now)
local topics = {} -- each new job's topic, once
for i = 0, njobs - 1 do
    local a = 4 + i * FIELDS
    local id, topic, body = ARGV[a], ARGV[a + 1], ARGV[a + 2]
    local ttr, retries, delay, at, k = ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5]),
        tonumber(ARGV[a + 6]), ARGV[a + 7]
    local jk = job_key(id)
    local state = redis.call('HGET', jk, 's')
    if state then
        out[#out + 1] = 'conflict:' .. state
    else
        local due = now + delay
        if at >= 0 then due = math.max(at, now) end
        -- One HSET per job: the state fields go in with the rest.
        local state
        if due <= now then
            state = {'s', 'ready', 'g', enqueue_ready(id, topic), 'd', '-1'}
            count(topic, 'ready', 1)
        else
            state = {'s', 'delay', 'd', num(due)}
            count(topic, 'delay', 1)
        end
        redis.call('HSET', jk, 't', topic, 'ttr', ttr, 'n', '0', 'r', retries, 'kb', '0',
            'c', snow, 'k', k, unpack(state))
        if due > now then schedule(id, k, due) end
        redis.call('SET', body_key(id), body)
        count(topic, 'added', 1)
        topics[topic] = true
        out[#out + 1] = 'ok'
    end
end
local new_topics = {}
for topic in pairs(topics) do new_topics[#new_topics + 1] = topic end
if #new_topics > 0 then redis.call('SADD', P .. ':topics', unpack(new_topics)) end
flush()
return out
