-- jobs: one page of a topic's jobs in one state, in the order of the set
-- that holds them: delay by due time (P:d:<topic>), reserved by TTR
-- deadline (P:w:<topic>), ready by sequence (P:r:<topic> merged with the
-- topic's ready push jobs, P:q:<topic>), buried by sequence (P:x:<topic>).
-- The position after which the page starts is a (score, id) pair: members
-- with a higher score, or the same score and a greater id (byte order, as
-- a sorted set orders equal scores), found by rank (entries_after in
-- common.lua), so a page costs the same whatever the set's size.
-- flags: no-writes
-- KEYS: P.
-- argv: topic state limit after_score after_id
-- after_score is '' from the start.
-- reply: more
-- reply entry: id score view
-- more is 1 when jobs follow the page, else 0; an `entry` per job follows
-- it, view being its job_view.
local topic, state, limit = ARGV[ARG.topic], ARGV[ARG.state], tonumber(ARGV[ARG.limit])
-- limit + 1: the first limit are the page, and one more tells that jobs follow.
local entries = entries_after(state_sets(topic, state), ARGV[ARG.after_score], ARGV[ARG.after_id],
    limit + 1)
local out = reply{more = #entries > limit and 1 or 0}
for i = 1, math.min(limit, #entries) do
    local id = entries[i][1]
    local view = job_view(id)
    if view then -- every member names a job of that state (kept with it)
        reply_entry({id = id, score = num(entries[i][2]), view = view}, out)
    end
end
return out
