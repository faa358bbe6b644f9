-- remove: finish or delete jobs, whatever their state.
-- ARGV: P, 'finished' | 'deleted', id1, id2, ...
-- Returns one integer per id: 1 removed, 0 no such job.
local kind = ARGV[2]
local out = {}
for i = 3, #ARGV do
    local id = ARGV[i]
    local jk = job_key(id)
    local j = redis.call('HMGET', jk, 's', 't', 'k')
    if not j[1] then
        out[#out + 1] = 0
    else
        if j[1] == 'delay' or j[1] == 'reserved' then
            redis.call('ZREM', bucket_key(j[3]), id)
        end
        count(j[2], j[1], -1)
        count(j[2], kind, 1)
        redis.call('DEL', jk, body_key(id))
        out[#out + 1] = 1
    end
end
flush()
return out
