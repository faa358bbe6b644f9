-- push_done: the outcome of one callback delivery, applied only if the job
-- is still reserved for that delivery (a late answer after the deadline
-- passed and the job moved on changes nothing).
-- KEYS: P.
-- argv: id attempt outcome wait_ms status error ms response
--   outcome: 'ok' (2xx: finished), 'gone' (410: deleted), 'wait' (429/503
--   with Retry-After: ready again after wait_ms, at most the last backoff
--   step), 'fail' (the next backoff step, or buried with retries spent);
--   status: the HTTP status or ''; error: a short text or ''; ms: how long
--   the attempt took; response: the response body's first bytes or ''.
-- Each outcome applied is logged in the job's delivery log (log_delivery).
-- Returns the job's new state ('finished', 'deleted', 'delay', 'ready',
-- 'buried') or 'stale'.
local id, attempt, outcome = ARGV[ARG.id], ARGV[ARG.attempt], ARGV[ARG.outcome]
local j = load_job(id)
if not j or j.state ~= 'reserved' or j.attempts ~= tonumber(attempt) or not j.push then return 'stale' end
local now = now_ms()
local status = tonumber(ARGV[ARG.status])
if status and status < 0 then status = nil end
local entry = {status = status, ms = tonumber(ARGV[ARG.ms]),
    response = ARGV[ARG.response] ~= '' and ARGV[ARG.response] or nil}
if outcome == 'ok' or outcome == 'gone' then
    local kind = outcome == 'ok' and 'finished' or 'deleted'
    -- before remove_job, which keeps the log with the record, or deletes it
    if keep_of(j.topic) > 0 then
        entry.at, entry.decision = now, kind
        log_delivery(id, entry)
    end
    remove_job(id, j, kind)
    return kind
end
-- after_failure writes them with the new state (and takes the job out of
-- its bucket and its topic's reserved index)
j.last_attempt_at, j.last_status, j.last_error, j.whole = now, ARGV[ARG.status], ARGV[ARG.error], true
-- 'fail' and 'wait' are failed attempts (stats' push_failed)
count(j.topic, 'push_failed', 1)
local wait = outcome == 'wait' and tonumber(ARGV[ARG.wait_ms]) or nil
local state = after_failure(id, j, now, wait)
entry.error = ARGV[ARG.error] ~= '' and ARGV[ARG.error] or nil
log_failed_delivery(id, j, state, now, entry)
return state
