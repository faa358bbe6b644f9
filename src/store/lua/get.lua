-- get: reads one job.
-- flags: no-writes
-- KEYS: P.
-- argv: allow:text id:text
-- Returns job_view (lib/70-history.lua's record).
-- Error: DQ_NOT_FOUND (no such job, or not the caller's topic).
local call = args()
limit_topics(call.allow)
local view, j = job_view(call.id)
if not view or not allowed(j.topic) then return redis.error_reply('DQ_NOT_FOUND') end
return view
