-- reschedule: a job in delay, ready or buried gets a new due time: it
-- becomes delay, or ready (at the back of its queue) when the time is not
-- in the future. A buried job comes back with a fresh allowance of
-- retries, as kick gives.
-- KEYS: P.
-- argv: allow id delay_ms at_ms
-- reply: state due
-- at_ms is -1 for none, else used instead of delay_ms. state is the new
-- state, due the new due time (ms) or -1.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT reserved.
limit_topics(ARGV[ARG.allow])
local id, delay, at = ARGV[ARG.id], tonumber(ARGV[ARG.delay_ms]), tonumber(ARGV[ARG.at_ms])
local j = load_job(id)
if not j or not allowed(j.topic) then return redis.error_reply('DQ_NOT_FOUND') end
if j.state == 'reserved' then return redis.error_reply('DQ_CONFLICT reserved') end
local now = now_ms()
local due = now + delay
if at >= 0 then due = math.max(at, now) end
if due <= now then
    transition(id, j, 'reschedule_now', {asked = due})
    return reply{state = 'ready', due = -1}
end
transition(id, j, 'reschedule', {due = due, asked = due})
return reply{state = 'delay', due = due}
