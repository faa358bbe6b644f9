-- touch: a reserved job's TTR deadline becomes now + ttr.
-- KEYS: P.
-- argv: allow:text id:text
-- Returns the new deadline (Unix ms).
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved,
-- DQ_CONFLICT delivering when it is a callback job (its request in flight).
local call = args()
limit_topics(call.allow)
local id = call.id
local j, refused = reserved_job(id)
if not j then return refused end
local due = now_ms() + j.ttr
transition(id, j, 'touch', {due = due})
return due
