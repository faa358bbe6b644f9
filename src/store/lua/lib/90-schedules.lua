-- lib/90-schedules.lua: schedules (periodic jobs).

-- Schedules (periodic jobs): P:sch:<id> is a schedule's hash (t topic, b
-- body, ttr, r retries, cron expression or '' and ev seconds or 0, tz, st
-- start and en end (Unix s, -1 none), a anchor (Unix s), n next fire (ms,
-- -1 none), l last fire (ms, -1 none), m missed fires, c created (ms));
-- P:sched holds the ids that have a next fire, scored by it; P:sched:ids
-- every id, scored 0 (listed by name).
function Key.sched(id) return P .. ':sch:' .. id end

-- A fire's job id: '<schedule id>@<fire in Unix seconds>' (FIRE_SEP; built
-- in C by store_fire_id, which also tells the schedule's shard from it).
local function fire_job_id(id, fire_ms)
    return id .. FIRE_SEP .. num(math.floor(fire_ms / 1000))
end

-- Sets a schedule's next fire in P:sched (-1: none). When it becomes the
-- earliest, the timer that fires the shard's schedules is told ("sched:<ms>"
-- on P:wake), since it sleeps until the earliest one.
local function sched_set_next(id, next_ms)
    local key = P .. ':sched'
    if next_ms < 0 then
        redis.call('ZREM', key, id)
        return
    end
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    redis.call('ZADD', key, num(next_ms), id)
    if not first[2] or next_ms < tonumber(first[2]) then
        redis.call('SPUBLISH', P .. ':wake', 'sched:' .. num(next_ms))
    end
end

