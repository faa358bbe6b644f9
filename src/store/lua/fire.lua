-- fire: fires a due schedule once, however many timers try: only while its
-- definition (version) and stored next fire are still the ones the caller
-- read, so a fire planned on a replaced definition, or by a timer that
-- stopped while others fired, writes nothing.
-- KEYS: P (the schedule's shard).
-- argv: id version:int expected_ms:int fire_ms:int next_ms:int missed:int bucket:int
-- version and expected_ms are as read by sched_due; fire_ms -1 fires
-- nothing, only moves on; next_ms is the fire after it (-1: none, the
-- schedule is past its end); missed counts the fires skipped since the
-- expected one; bucket is the fire's job's.
-- The fire is the ordinary job fire_job_id(id, fire ms), due at the fire
-- time, made with create_job unless a job of that id exists already.
-- (Such ids live in the shard of the schedule id they start with,
-- store_shard_of, so the job is in this shard.)
-- Returns 'fired', 'exists' (the job was there), 'moved' (no fire asked) or
-- 'stale' (the schedule changed, went, or another timer fired it: nothing
-- written).
local call = args()
local id = call.id
local sk = Key.sched(id)
local s = redis.call('HMGET', sk, 'n', 't', 'b', 'ttr', 'r', 'bo', 'u', 'to', 'v')
if not s[1] or tonumber(s[1]) ~= call.expected_ms or (tonumber(s[9]) or 0) ~= call.version then
    return 'stale'
end
local fire, nxt, missed = call.fire_ms, call.next_ms, call.missed
local result = 'moved'
if fire >= 0 then
    local jid = fire_job_id(id, fire)
    if redis.call('EXISTS', Key.job(jid)) == 1 then
        result = 'exists'
    else
        local now = now_ms()
        local seq = fire <= now and reserve_seq(1) or nil
        local f = {topic = s[2], body = s[3], ttr = s[4], retries = s[5], k = call.bucket,
            due = fire}
        if s[6] and s[6] ~= '' then f.backoff = s[6] end
        if s[7] and s[7] ~= '' then f.url, f.timeout = s[7], s[8] end
        create_job(jid, f, now, seq)
        result = 'fired'
    end
    redis.call('HSET', sk, 'l', num(fire))
end
if missed > 0 then redis.call('HINCRBY', sk, 'm', num(missed)) end
redis.call('HSET', sk, 'n', num(nxt))
sched_set_next(id, nxt)
return result
