-- jobs: one page of a topic's jobs in one state, in the order of the set
-- that holds them: delay by due time (P:d:<topic>), reserved by TTR
-- deadline (P:w:<topic>), ready by sequence (P:r:<topic> merged with the
-- topic's ready push jobs, P:q:<topic>), buried by sequence (P:x:<topic>),
-- finished and deleted (kept records) newest first (P:hf:<topic>,
-- P:hd:<topic>, scored by minus the ended time). A record's index entry
-- can outlive it until the next record of the topic trims it: such an
-- entry is left out of the page, so the page may hold fewer jobs than it
-- looked at (none at all): the next page starts after the last entry
-- looked at (last_score, last_id), not after the last job answered.
-- The position after which the page starts is a (score, id) pair: members
-- with a higher score, or the same score and a greater id (byte order, as
-- a sorted set orders equal scores), found by rank (entries_after in
-- lib/20-keys.lua), so a page costs the same whatever the set's size.
-- flags: no-writes
-- KEYS: P.
-- argv: topic state limit:int after_score after_id
-- after_score is '' from the start.
-- reply: more last_score last_id
-- reply entry: id score view
-- more is 1 when jobs follow the page, else 0; last_score and last_id the
-- position of the last entry looked at (false when none was); an `entry`
-- per job follows them, view being its job_view.
local call = args()
local topic, state, limit = call.topic, call.state, call.limit
-- limit + 1: the first limit are the page, and one more tells that jobs follow.
local entries = entries_after(state_sets(topic, state), call.after_score, call.after_id, limit + 1)
local looked = math.min(limit, #entries)
local last = entries[looked]
local out = reply{more = #entries > limit and 1 or 0, last_score = last and num(last[2]) or false,
    last_id = last and last[1] or false}
local history = state == 'finished' or state == 'deleted'
for i = 1, looked do
    local id = entries[i][1]
    local view
    if history then
        local r = record_of_entry(id, topic, -entries[i][2])
        view = r and record_view(r)
    else
        view = job_view(id) -- every member names a job of that state (kept with it)
    end
    if view then
        reply_entry({id = id, score = num(entries[i][2]), view = view}, out)
    end
end
return out
