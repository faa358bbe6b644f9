-- purge: one bounded step of deleting a topic's jobs in one state in this
-- shard. delayq-fcgi walks each state's sets (state_sets) in order, a
-- step at a time, from the position the previous step ended at, and calls
-- again while `more` is 1; every step is one atomic call that looks at no
-- more than `limit` jobs, so Redis is never held for long whatever the
-- topic's size.
-- A job goes exactly as `delete` removes it (remove_job: its bucket and
-- index entries, its topic's gauges, `deleted`, the push sets and hold),
-- except that it leaves no kept record (history is of deliveries, and a
-- purge empties a queue: its ids may be added again at once),
-- and only when it was created before the purge's first step in the
-- shard, whose time is `since`: jobs added while a purge runs are kept,
-- also those of `since`'s millisecond (the first step records when it
-- began in P:purging, and create_job notes a job created after it in that
-- millisecond in P:purge_born; lib/70-history.lua). A job
-- that changes state while it runs is deleted when the walk meets it
-- again in its new state.
-- KEYS: P.
-- argv: topic state limit:int since:int? after_score after_id
-- since is absent on the purge's first step in the shard (the step takes
-- Redis' time); after_score '' starts at the head of the state.
-- reply: purged more since after_score after_id
-- purged: jobs deleted by this step; more: 1 when the state has jobs after
-- the step's last; since, after_score, after_id: what the next step takes.
local call = args()
local topic, state, limit = call.topic, call.state, call.limit
local since = call.since or clock()
if not call.since then
    redis.call('HSET', P .. ':purging', topic, num(since))
    redis.call('PEXPIRE', P .. ':purging', num(PURGING_MS))
end
-- The notes of since's millisecond live while the purge does.
redis.call('PEXPIRE', P .. ':purge_born', num(PURGE_BORN_MS))
local function created_before_purge(id, j)
    return j.created < since or j.created == since and
        redis.call('SISMEMBER', P .. ':purge_born', num(since) .. ':' .. id) == 0
end
local after_score, after_id = call.after_score, call.after_id
local entries = entries_after(state_sets(topic, state), after_score, after_id, limit + 1)
local looked = math.min(limit, #entries)
local purged = 0
for i = 1, looked do
    local id = entries[i][1]
    local j = load_job(id, true) -- removing needs only the head
    -- every member names a job of that state (kept with it)
    if j and created_before_purge(id, j) then
        remove_job(id, j, 'deleted', true) -- emptying a queue keeps no history
        purged = purged + 1
    end
end
if looked > 0 then
    after_score, after_id = num(entries[looked][2]), entries[looked][1]
end
return reply{purged = purged, more = #entries > limit and 1 or 0, since = since,
    after_score = after_score, after_id = after_id}
