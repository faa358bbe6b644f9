-- bury: a reserved job is set aside until kicked.
-- KEYS: P.
-- argv: allow:text id:text
-- Returns 'ok'.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT <state> when the job is not reserved,
-- DQ_CONFLICT delivering when it is a callback job (its request in flight).
local call = args()
limit_topics(call.allow)
local id = call.id
local j = load_job(id)
if not j or not allowed(j.t) then return redis.error_reply('DQ_NOT_FOUND') end
local conflict = reserved_conflict(j)
if conflict then return conflict end
transition(id, j, 'bury')
return 'ok'
