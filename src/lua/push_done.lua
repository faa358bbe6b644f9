-- push_done: the outcome of one callback delivery, applied only if the job
-- is still reserved for that delivery (a late answer after the deadline
-- passed and the job moved on changes nothing).
-- KEYS: P. ARGV: id, attempt, outcome, wait_ms, status, error
--   outcome: 'ok' (2xx: finished), 'gone' (410: deleted), 'wait' (429/503
--   with Retry-After: ready again after wait_ms, at most the last backoff
--   step), 'fail' (the next backoff step, or buried with retries spent);
--   status: the HTTP status or ''; error: a short text or ''.
-- Returns the job's new state ('finished', 'deleted', 'delay', 'ready',
-- 'buried') or 'stale'.
local id, attempt, outcome = ARGV[1], ARGV[2], ARGV[3]
local jk = job_key(id)
local j = redis.call('HMGET', jk, 's', 't', 'k', 'n', 'r', 'kb', 'u', 'bo')
if j[1] ~= 'reserved' or j[4] ~= attempt or not j[7] then return 'stale' end
local now = now_ms()
if outcome == 'ok' or outcome == 'gone' then
    local kind = outcome == 'ok' and 'finished' or 'deleted'
    remove_job(id, {j[1], j[2], j[3], j[7]}, kind)
    return kind
end
redis.call('HSET', jk, 'la', num(now), 'ls', ARGV[5], 'le', ARGV[6])
unschedule(id, j[3], j[2], 'reserved')
local wait = outcome == 'wait' and tonumber(ARGV[4]) or nil
return after_failure(id, {j[2], j[3], j[4], j[5], j[6], j[7], j[8]}, now, wait)
