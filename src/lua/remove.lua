-- remove: finish or delete jobs, whatever their state.
-- KEYS: P. ARGV: allow, 'finished' | 'deleted', id1, id2, ...
-- Returns one item per id: 'ok', or 'DQ_NOT_FOUND' when there is no such
-- job or the caller may not act on its topic (the two answer alike, so a
-- token limited to topics cannot learn which other ids exist).
limit_topics(ARGV[1])
local kind = ARGV[2]
local out = {}
for i = 3, #ARGV do
    local id = ARGV[i]
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 's', 't', 'k', 'u')
    if not j[1] or not allowed(j[2]) then
        out[#out + 1] = 'DQ_NOT_FOUND'
    else
        remove_job(id, j, kind)
        out[#out + 1] = 'ok'
    end
end
return out
