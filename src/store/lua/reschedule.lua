-- reschedule: a job in delay, ready or buried gets a new due time: it
-- becomes delay, or ready (at the back of its queue) when the time is not
-- in the future. A buried job comes back with a fresh allowance of
-- retries, as kick gives.
-- KEYS: P.
-- argv: allow id delay_ms:int at_ms:int?
-- reply: state due
-- at_ms, when given, is used instead of delay_ms. state is the new
-- state, due the new due time (ms) or -1.
-- Errors: DQ_NOT_FOUND; DQ_CONFLICT reserved.
local call = args()
limit_topics(call.allow)
local id = call.id
local j = load_job(id)
if not j or not allowed(j.topic) then return redis.error_reply('DQ_NOT_FOUND') end
if j.state == 'reserved' then return redis.error_reply('DQ_CONFLICT reserved') end
local now = now_ms()
local due = now + call.delay_ms
if call.at_ms then due = math.max(call.at_ms, now) end
if due <= now then
    transition(id, j, 'reschedule_now', {asked = due})
    return reply{state = 'ready', due = -1}
end
transition(id, j, 'reschedule', {due = due, asked = due})
return reply{state = 'delay', due = due}
