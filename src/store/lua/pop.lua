-- pop: finishes the jobs a consumer is done with (finish-and-pop), then
-- reserves up to `count` ready jobs, taking from the topics in order (a
-- paused topic gives none).
-- KEYS: P. ARGV: allow, count, nfinish, nfinish ids, topic1, topic2, ...
-- Returns {finish items (see remove_ids), {id, topic, body, attempts,
-- ttr_ms}, ...}: the finish items first, then the jobs.
limit_topics(ARGV[1])
local want = tonumber(ARGV[2])
local nfinish = tonumber(ARGV[3])
local finished = remove_ids(ARGV, 'finished', 4, 3 + nfinish)
local now = now_ms()
local out = {}

for ti = 4 + nfinish, #ARGV do
    local topic = ARGV[ti]
    local taken = {}
    if not paused(topic) then
        taken = redis.call('ZPOPMIN', ready_key(topic), num(want - #out))
    end
    for i = 1, #taken, 2 do
        local id = taken[i]
        local j = load_job(id)
        local due = now + j.ttr
        j.s, j.n, j.d = 'reserved', j.n + 1, due
        store_job(id, j)
        schedule(id, j.k, due, topic, 'reserved', true)
        move_count(topic, 'ready', 'reserved')
        count(topic, 'popped', 1)
        out[#out + 1] = {id, topic, job_body(j), j.n, j.ttr}
    end
    if #out >= want then break end
end
table.insert(out, 1, finished)
return out
