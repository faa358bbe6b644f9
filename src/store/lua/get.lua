-- get: reads one job.
-- flags: no-writes
-- KEYS: P.
-- argv: allow id
-- Returns job_view (lib/70-history.lua's record).
-- Error: DQ_NOT_FOUND (no such job, or not the caller's topic).
limit_topics(ARGV[ARG.allow])
local view, j = job_view(ARGV[ARG.id])
if not view or not allowed(j.topic) then return redis.error_reply('DQ_NOT_FOUND') end
return view
