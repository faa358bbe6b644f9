-- kick_ids: named buried jobs become ready (push jobs go back to P:push),
-- each with a fresh allowance of retries, as kick gives.
-- KEYS: P.
-- argv: allow:text ids:text...
-- Returns one item per id: 'ok', 'DQ_CONFLICT <state>' when the job is not
-- buried, or 'DQ_NOT_FOUND' (no such job, or not the caller's topic).
local call = args()
limit_topics(call.allow)
local out = {}
local seq
for i, id in ipairs(call.ids) do
    local j = load_job(id)
    if not j or not allowed(j.topic) then
        out[#out + 1] = 'DQ_NOT_FOUND'
    elseif j.state ~= 'buried' then
        out[#out + 1] = 'DQ_CONFLICT ' .. j.state
    else
        if not seq then seq = reserve_seq(#call.ids - i + 1) else seq = seq + 1 end
        transition(id, j, 'kick', {seq = seq})
        out[#out + 1] = 'ok'
    end
end
return out
