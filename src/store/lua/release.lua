-- release: a reserved job goes back to delay, or is buried when it has used
-- all its retries. Without a delay it is a failed delivery: ready at once,
-- or after its backoff step when it has one.
-- KEYS: P.
-- argv: allow id delay_ms:int
-- Returns the new state: 'delay', 'ready' or 'buried'.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved,
-- DQ_CONFLICT delivering when it is a callback job (its request in flight).
local call = args()
limit_topics(call.allow)
local id, delay = call.id, call.delay_ms
local j, refused = reserved_job(id)
if not j then return refused end
if delay <= 0 or retries_spent(j.attempts, j.retries, j.attempts_at_kick) then
    return after_failure(id, j, now_ms())
end
return transition(id, j, 'release', {due = now_ms() + delay})
