-- kick_ids: named buried jobs become ready (push jobs go back to P:push),
-- each with a fresh allowance of retries, as kick gives.
-- KEYS: P.
-- argv: allow
-- The ids follow.
-- Returns one item per id: 'ok', 'DQ_CONFLICT <state>' when the job is not
-- buried, or 'DQ_NOT_FOUND' (no such job, or not the caller's topic).
limit_topics(ARGV[ARG.allow])
local out = {}
local seq
for i = NARGS + 1, #ARGV do
    local id = ARGV[i]
    local j = load_job(id)
    if not j or not allowed(j.topic) then
        out[#out + 1] = 'DQ_NOT_FOUND'
    elseif j.state ~= 'buried' then
        out[#out + 1] = 'DQ_CONFLICT ' .. j.state
    else
        if not seq then seq = reserve_seq(#ARGV - i + 1) else seq = seq + 1 end
        transition(id, j, 'kick', {seq = seq})
        out[#out + 1] = 'ok'
    end
end
return out
