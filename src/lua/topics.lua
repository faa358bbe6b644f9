-- topics: the topic of each job, for access checks of tokens limited to
-- topics. ARGV: P, id1, id2, ... Returns one topic (or false) per id.
local out = {}
for i = 2, #ARGV do
    out[#out + 1] = redis.call('HGET', job_key(ARGV[i]), 't') or false
end
return out
